"""The read side: `load()` (a finished build as a tf.data.Dataset), `verify` (every record checked against
metadata.json) and `inspect` (a report and plots). It reads what shardsmith.format defines and manifests through
shardsmith.core.manifest; it never imports a build stage (transforms/) or the build (pipeline/).
"""
