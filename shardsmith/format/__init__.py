"""What a shardsmith dataset is, defined once: file names and splits (naming), TFRecord framing (tfrecord), the
record's keys and Example encoding (example), metadata.json, labels.txt and errors.jsonl (metadata), the TFDS
files (tfds) and the output folder's builds (build_folder).

The writer, `load()`, `verify`, `inspect` and the report import these; nothing else spells a key, a file name or
a checksum. Imports neither Beam nor TensorFlow; files are read and written through shardsmith.storage.
"""
