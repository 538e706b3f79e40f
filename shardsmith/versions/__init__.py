"""Versions, Beam-free: what an --incremental night carries over from the published version and adds to it, how
shards are rewritten without removed rows, and how compaction rewrites a version's generations into one
(docs/versions.md). Imports shardsmith.output_folder, the Beam-free work (shardsmith.manifest, rows, images,
shard_writer, ...), shardsmith.format and shardsmith.storage only, never Beam or TensorFlow: the shard writers that
rewrite and copy records run it in processes of tens of megabytes (tests/test_import_rules.py checks both).

The modules, by role:
- carry_over: the model of a night: the published version it starts from (CarriedVersion, CarriedShard), rows
  paired with records by identity (pair_rows, RecordPlace) and the metadata.json of the version it makes
  (merged_version), and whether a night's version holds anything new (unchanged).
- spill: the pairing's partitioned join through spill files in the build's scratch folder (bounded memory).
- shard_rewrite: a shard of an earlier generation rewritten without its removed records.
- row_check: a shard's row list checked against its shard, and rebuilt from it when lost.
- failed_again: rows that failed in the published version and fail again (not counted against the budget), and
  whether a night's failures are the version's (same_failures).
- published_pairs: a night's near-duplicate candidates against the published records.
- compaction: the version `shardsmith compact` rewrites (CompactionSource) and its rows, placed as a full build's;
  record_copy: one compacted shard, its records copied byte for byte.

The rest of versions lives where its layer puts it: the stages in transforms/versions/ (carried_rows: the
night's pairing; rewritten_shards: its rewrites; compact_version: the compaction pipeline), the launcher's checks
of the published version in pipeline/checks/incremental.py and the `compact` command in
pipeline/commands/compact.py (its flags in pipeline/options/compact_options.py); the row list's format in
shardsmith/format/row_list.py; the output folder itself, which every build uses (its layout, publishing a
version, retention, tags, the retired list, the lock, opening a version), in shardsmith/output_folder/; the
`shardsmith versions` command in pipeline/commands/versions.py, over the listing in shardsmith/read/versions.py.

Outside shardsmith/versions/ and transforms/versions/, code imports the names below from this package, never
its modules.
"""

from shardsmith.versions.carry_over import CarriedShard, CarriedVersion, empty_new_shards, merged_version, unchanged
from shardsmith.versions.compaction import compaction_source, most_generations
from shardsmith.versions.failed_again import count_failed_again, same_failures
from shardsmith.versions.published_pairs import (
    MAX_BUCKET_COMPARISONS,
    confirmed_published_pairs,
    count_published_candidates,
    take_new,
)
from shardsmith.versions.row_check import unrecoverable

__all__ = [
    "MAX_BUCKET_COMPARISONS",
    "CarriedShard",
    "CarriedVersion",
    "compaction_source",
    "confirmed_published_pairs",
    "count_failed_again",
    "count_published_candidates",
    "empty_new_shards",
    "merged_version",
    "most_generations",
    "same_failures",
    "take_new",
    "unchanged",
    "unrecoverable",
]
