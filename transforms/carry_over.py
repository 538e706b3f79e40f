"""`--incremental`: tell the manifest's rows apart into carried and new ones, and rewrite the published version's
shards that hold removed rows (shardsmith/core/carry_over.py has the model).

Only identities and manifest rows go through the CoGroupByKey here, never image bytes; a carried row's image is
neither read nor stat'ed (it leaves before LookupSizes). Memory: one identity's rows and records per worker, one
shard's row list per reader. The removed rows are checked against --max_removed_fraction before anything
downstream of `gate` runs: the vocabulary waits for the check, and the shards wait for the vocabulary.
"""

from __future__ import annotations

from collections.abc import Iterator

import apache_beam as beam

from shardsmith import storage
from shardsmith.core.carry_over import CarriedVersion, RecordPlace, pair_rows
from shardsmith.core.row_identity import row_identity
from shardsmith.core.rows import ManifestRow, RowBatch
from shardsmith.core.shard_file import WriterConfig
from shardsmith.core.shard_rewrite import rewrite_shard
from shardsmith.format.build_folder import build_dir
from shardsmith.format.naming import row_list_name
from shardsmith.format.row_list import RowListError, parse_row_list
from transforms.metrics import ROWS_CARRIED, ROWS_NEW, ROWS_REMOVED, count
from transforms.report import DatasetCheckFailed

CARRIED, REMOVED = "carried", "removed"


def _keyed_rows(batch: RowBatch) -> Iterator[tuple[str, ManifestRow]]:
    for row in batch:
        yield row_identity(row), row


def _listed_records(shard_index: int, output_dir: str, version: CarriedVersion) -> Iterator[tuple[str, RecordPlace]]:
    carried = version.shards[shard_index]
    path = storage.join(build_dir(output_dir, carried.build), row_list_name(carried.entry.file))
    data = storage.read_bytes(path)
    if data is None:
        raise RowListError(f"{path} is missing: the published version's rows are not listed")
    for position, row in enumerate(parse_row_list(data, path)):
        yield row.identity, RecordPlace(shard_index, position, row.lines)


class PairRowsFn(beam.DoFn):
    """(identity, {"rows": [...], "records": [...]}) -> new rows (main, one RowBatch per identity that has any),
    removed records (tagged `removed`) and the manifest lines carried (tagged `carried`)."""

    def process(self, element) -> Iterator:
        _, grouped = element
        pairing = pair_rows(list(grouped["rows"]), list(grouped["records"]))
        if pairing.carried_lines:
            count(ROWS_CARRIED, pairing.carried_lines)
            yield beam.pvalue.TaggedOutput(CARRIED, pairing.carried_lines)
        for place in pairing.removed:
            count(ROWS_REMOVED, place.lines)
            yield beam.pvalue.TaggedOutput(REMOVED, place)
        if pairing.new_rows:
            count(ROWS_NEW, sum(len(row.lines) for row in pairing.new_rows))
            yield RowBatch(pairing.new_rows)


def check_removals(removed_lines: int, version: CarriedVersion) -> int:
    """The removed lines, or DatasetCheckFailed when they are more than --max_removed_fraction of the version."""
    fraction = removed_lines / version.num_rows if version.num_rows else 0.0
    if fraction > version.max_removed_fraction:
        raise DatasetCheckFailed(
            f"the manifest lacks {removed_lines:,} of the {version.num_rows:,} rows of version {version.previous} "
            f"({fraction:.1%}), more than --max_removed_fraction={version.max_removed_fraction}; nothing was "
            "published: check that the manifest is complete (a truncated export?), or raise "
            "--max_removed_fraction to publish the version without them")
    return removed_lines


class SplitCarriedRows(beam.PTransform):
    """Split RowBatches -> `rows` (new rows, in RowBatches), `removed` (RecordPlaces), `carried_lines` and
    `removed_lines` (one-element sums; `removed_lines` is checked against --max_removed_fraction)."""

    def __init__(self, output_dir: str, version: CarriedVersion):
        super().__init__()
        self._output_dir = output_dir
        self._version = version

    def expand(self, batches):
        version = self._version
        keyed_rows = batches | "KeyByIdentity" >> beam.FlatMap(_keyed_rows)
        records = (
            batches.pipeline
            | "ListCarriedShards" >> beam.Create(range(len(version.shards)))
            | "ReadRowLists" >> beam.FlatMap(_listed_records, self._output_dir, version)
        )
        paired = (
            {"rows": keyed_rows, "records": records}
            | "GroupByIdentity" >> beam.CoGroupByKey()
            | "PairRows" >> beam.ParDo(PairRowsFn()).with_outputs(CARRIED, REMOVED, main="rows")
        )
        carried_lines = paired[CARRIED] | "SumCarried" >> beam.CombineGlobally(sum)
        removed_lines = (
            paired[REMOVED]
            | "RemovedLines" >> beam.Map(lambda place: place.lines)
            | "SumRemoved" >> beam.CombineGlobally(sum)
            | "CheckRemovals" >> beam.Map(check_removals, version)
        )
        return {"rows": paired.rows, "removed": paired[REMOVED], "carried_lines": carried_lines,
                "removed_lines": removed_lines}


class RewriteShardFn(beam.DoFn):
    """(carried shard index, [RecordPlace, ...]) -> (shard index, ShardResult) of the shard rewritten without
    those records into the build's folder."""

    def __init__(self, config: WriterConfig, output_dir: str, version: CarriedVersion):
        self._config = config
        self._output_dir = output_dir
        self._version = version

    def process(self, element, _removals_checked) -> Iterator:
        shard_index, places = element
        carried = self._version.shards[shard_index]
        removed = {place.position for place in places}
        yield shard_index, rewrite_shard(self._config, carried.split, build_dir(self._output_dir, carried.build),
                                         carried.entry.file, removed)


class RewriteShards(beam.PTransform):
    """RecordPlaces of removed records -> (shard index, ShardResult) per rewritten shard; runs only once the
    removals passed their check (`removed_lines`, a side input)."""

    def __init__(self, config: WriterConfig, output_dir: str, version: CarriedVersion):
        super().__init__()
        self._fn = RewriteShardFn(config, output_dir, version)

    def expand(self, inputs):
        removed, removed_lines = inputs
        return (
            removed
            | "KeyByShard" >> beam.Map(lambda place: (place.shard, place))
            | "GroupByShard" >> beam.GroupByKey()
            | "RewriteShard" >> beam.ParDo(self._fn, beam.pvalue.AsSingleton(removed_lines))
        )


def gated(collection, check, label: str):
    """`collection`, each element passed on only after the one-element `check` was computed (a side input)."""
    return collection | label >> beam.Map(lambda value, _checked: value, beam.pvalue.AsSingleton(check))

