"""What a shardsmith dataset is, defined once: file names and splits (naming); the record file behind one face
(record_file; TFRecord framing in tfrecord), its index files (record_index) and checksums (file_checksum); the
record's keys and Example encoding (example, example_wire); metadata.json's schema and bytes (metadata_schema,
indented_json), labels.txt and errors.jsonl (metadata); the row lists a night reads (row_list); the TFDS files
(tfds) and tf.transform's transform_fn (transform_fn); the output folder's builds, their records and retention
(build_folder, build_record), tags and the retired list (tags, retired).

The writer, `load()`, `verify`, `inspect` and the report import these; nothing else spells a key, a file name or
a checksum. Imports neither Beam nor TensorFlow; files are read and written through shardsmith.storage.
"""
