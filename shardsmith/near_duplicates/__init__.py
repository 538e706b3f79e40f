"""The near-duplicate search (`--near_duplicates`), without Beam or TensorFlow:

- `perceptual_hash`: an image's signature (its 64-bit pHash and the low-frequency terms the confirmation compares);
- `near_duplicate_search`: band buckets of hashes, the pairs within a distance, and their confirmation;
- `identical_signatures`: images with one signature handled as one group, so blank images do not pair quadratically.

The stages (transforms/near_duplicates.py, transforms/identical_groups.py) and the shard writer, which signs what it
writes, call it. Imports only shardsmith.images, shardsmith.settings and shardsmith.format; numpy and scipy only when
a signature is made or compared.
"""
