"""Images, read and made ready for a record, without Beam or TensorFlow (a shard writer process runs them):

- `load_images`: an input image read (bounded, through shardsmith.storage's safe opener) and checked, so that every
  written record decodes with TensorFlow to the shape it records; reads in a bounded thread pool, in input order;
- `reencode`: `--max_side` and `--reencode` (decode, orient, shrink, encode; deterministic bytes);
- `masks`: a class-mask image checked against its image and stored as PNG;
- `image_file_names`: which file names are images (class folders, the swapped-columns checks, failure hints).

Imports only shardsmith.settings (the defaults), shardsmith.format and shardsmith.storage: rows, manifests, the
shard writer and the near-duplicate search import it, never the other way round. Pillow is imported when an image
is opened, not with the package.
"""
