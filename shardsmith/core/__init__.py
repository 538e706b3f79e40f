"""The Beam-free, TensorFlow-free work the build's stages call, by concern:

- settings: `settings` (every build option's declaration, with `flag`'s declaration helpers); `fault_injection`
  (the tests' kill points) and `progress_signal` (counters a process reports to the progress line);
- manifests: `manifest/` (one module per format, the appended night's reading), `annotations` (several labels,
  boxes, masks and extra columns from manifest fields), `label_list` (a --label_file), `look_alike_labels`
  (labels that differ only in Unicode form), `parallel_parse` (a large manifest's lines parsed in the writer
  processes);
- the row model: `rows` (ManifestRow, PlacedRow and their batches), `row_identity` (what pairs a row with its
  record across nights), `failures` (why rows failed, in one line a person can act on);
- images and the shard writer: `load_images`, `reencode`, `masks`, `encode`, `shard_file` (one shard file),
  `split_shard` (the last shard in parts, joined), `shard_worker` and `orphaned_writers` (the writer processes);
- near-duplicate search: `perceptual_hash`, `near_duplicate_search`, `identical_signatures` (identical-looking
  images handled as one).

The output folder's lock, with its layout, retention and publishing, is shardsmith/output_folder/'s.

A shard writer process imports this and shardsmith.format only, so it costs tens of megabytes, not the
0.2-0.7 GB that Beam and TensorFlow take (tests/test_import_rules.py checks it in a fresh interpreter).
"""
