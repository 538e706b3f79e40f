"""The read side: `load()` (a finished build as a tf.data.Dataset), `records()` and the TensorFlow-free record
reader, the dataset checks (`dataset_checks/`: every record checked against metadata.json), the report and the
summary (`summary.py`), inspect's plots, the versions a reader can pin. It reads what shardsmith.format defines and
manifests through shardsmith.manifest; it only reads (no lock, no write, no command line: the commands are
pipeline/commands/), and never imports a build stage (transforms/) or the build (pipeline/).
"""
