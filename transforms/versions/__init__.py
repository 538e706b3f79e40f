"""The stages of versions (the Beam side of shardsmith/versions/, which holds the model and the work):

- carried_rows: an --incremental night's rows told apart into carried and new ones through the partitioned join
  (SplitCarriedRows), and row lists that do not describe their shards turned into one-line dataset check
  failures (row_lists_checked).
- rewritten_shards: the shards holding removed rows rewritten without them (RewriteShards), by the writer
  processes of a local run.
- compact_version: `shardsmith compact`'s pipeline (CompactVersion), from the published version's row lists to
  the compacted version, published with shardsmith.versions' publish_version as a build's report publishes.

The build's graph (pipeline/graph.py) wires carried_rows and rewritten_shards in; the `compact` command
(pipeline/commands/compact.py) runs compact_version.
"""
