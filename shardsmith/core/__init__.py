"""The Beam-free, TensorFlow-free work the build's stages call: reading manifests (manifest, annotations), the
rows that travel between stages (rows), and what a shard writer process runs: load, validate, re-encode, masks,
encode and write one shard file (load_images, reencode, masks, encode, shard_file, shard_worker), with the
output folder's lock (build_lock).

A shard writer process imports this and shardsmith.format only, so it costs tens of megabytes, not the
0.2-0.7 GB that Beam and TensorFlow take (tests/test_import_rules.py checks it in a fresh interpreter).
"""
