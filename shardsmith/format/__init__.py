"""What a shardsmith dataset is, defined once: file names and splits (naming); the record file behind one face
(record_file; TFRecord framing in tfrecord), its index files (record_index) and checksums (file_checksum); the
record's keys and Example encoding (example, example_wire); metadata.json's schema and bytes (metadata_schema,
indented_json), labels.txt and errors.jsonl (metadata); the row lists a night reads (row_list); the TFDS files
(tfds) and tf.transform's transform_fn (transform_fn); a build's record and written list, and the one way a
file is written into a build's folder, claimed first (build_record). The output folder's layout, retention,
tags, the retired list and the lock are shardsmith/output_folder/'s.

The writer, `load()`, `verify`, `inspect` and the report import these; nothing else spells a key, a file name or
a checksum. Imports neither Beam nor TensorFlow; files are read and written through shardsmith.storage.
"""
