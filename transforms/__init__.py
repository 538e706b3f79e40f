"""The build's Beam stages, one PTransform (and its DoFns) per module, in the order a row travels.

The convention every stage keeps: a stage that can reject rows returns `.rows` and `.errors` (a DoOutputsTuple from
`with_outputs(ERRORS, main="rows")`, or `StageOutputs`); its errors are ErrorRows, whose stage and reason end up in
errors.jsonl, emitted through transforms.metrics.rejected, which counts them (the Beam metric errors_<stage>,
docs/metrics.md). The work itself (parsing, image checks, encoding, writing files) is Beam-free and lives in
shardsmith's parts (manifest, images, shard_writer, near_duplicates, ...), versions and format; a stage module holds the
Beam plumbing around it. The stages of versions (an --incremental night's pairing and rewrites, compaction) are in
versions/. Four modules are the stages' shared Beam plumbing rather than stages: thread_pool (a DoFn base for I/O-bound
work), row_coder (the coder RowBatches cross stage boundaries in), metrics, and gather (one value from a small whole
PCollection, cheaper to construct and run than CombineGlobally).
"""

from __future__ import annotations

from typing import NamedTuple

ERRORS = "errors"  # the tag of every stage's rejected rows


class StageOutputs(NamedTuple):
    """A rejecting stage's outputs when they are not one ParDo's: the rows that go on, and the ErrorRows."""

    rows: object
    errors: object
