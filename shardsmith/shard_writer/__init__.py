"""The shard writer: what turns placed rows into shard files, in the writer processes of a local build or in a
Beam worker, without Beam or TensorFlow:

- `shard_file`: one shard written (images loaded, checked, re-encoded, masked, encoded, framed, renamed into place
  with its index file and row list); `shard_output`: the shard's file as written (checksummed, then renamed) and
  the files beside it; `writer_config`: where a writer writes (a build's target: its folder and its lock as one
  value) and how it makes records; `encode`: a row and its image as one record's bytes;
- `split_shard`: the last shard written in parts by several processes and joined, the same bytes as one writer's;
- `shard_worker`: the pool of plain Python writer processes (`python -m shardsmith.shard_writer.shard_worker`);
  `orphaned_writers`: a writer whose build is gone exits without renaming anything into place;
  `jobs_in_hand`: the jobs a stage has sent to that pool, a bounded number at a time, answered in order;
- `parallel_parse`: a large line manifest's lines parsed by the same processes (it reads manifests through
  shardsmith.manifest's interface).

A writer process imports only light modules (this package, the images, rows, settings, the near-duplicate
signatures, manifests when it parses, the output folder's lock, shardsmith.format and storage), so it costs tens of
megabytes, not the 0.2-0.7 GB Beam and TensorFlow take (tests/test_import_rules.py checks it in a fresh
interpreter). None of those imports it: it is the top of the Beam-free work, under the versions and the stages.
"""
