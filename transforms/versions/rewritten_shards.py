"""The stage of an --incremental night that rewrites each published shard holding removed rows without them, from
the shard's own records (shardsmith/versions/shard_rewrite.py), into the night's build folder.

Guarantees: a shard is rewritten only once the removals passed their check (`--max_removed_fraction`); the same
bytes wherever it is rewritten. In a local run with writer processes and a version of at least
REWRITE_IN_PROCESS_RECORDS records, the writer processes rewrite the shards, at most
SHARDS_IN_FLIGHT_PER_PROCESS each in hand (a removal of 1% of a million rows rewrites nearly every shard, each
record read, checked against its row list and written again: one core's work otherwise); a row list that does not
describe its shard fails the night in one line either way.
"""

from __future__ import annotations

from collections.abc import Iterator

import apache_beam as beam

from shardsmith.output_folder import BuildTarget, build_dir
from shardsmith.shard_writer.jobs_in_hand import JobsInHand
from shardsmith.shard_writer.writer_config import WriterConfig
from shardsmith.versions.carry_over import CarriedVersion
from shardsmith.versions.shard_rewrite import rewrite_in_writer_process, rewrite_shard
from transforms.gather import in_global_window
from transforms.versions.carried_rows import accepted, row_lists_checked

# A version of fewer records has its shards rewritten in the launcher's own process: a night of a small version
# would otherwise start writer processes only to rewrite a few small shards.
REWRITE_IN_PROCESS_RECORDS = 1 << 14
SHARDS_IN_FLIGHT_PER_PROCESS = 2


class RewriteShardFn(beam.DoFn):
    """(carried shard index, [RecordPlace, ...]) -> (shard index, ShardResult) of the shard rewritten without
    those records into the build's folder, by the build's writer processes when it has `processes` and the version
    is large enough (the module), else in process()."""

    def __init__(self, config: WriterConfig, output_dir: str, version: CarriedVersion, processes: int = 0):
        self._config = config
        self._output_dir = output_dir
        self._version = version
        self._processes = processes if version.num_records >= REWRITE_IN_PROCESS_RECORDS else 0
        self._jobs: JobsInHand | None = None

    def process(self, element, _removals_checked) -> Iterator:
        shard_index, places = element
        carried = self._version.shards[shard_index]
        job = (self._config, carried.split, build_dir(self._output_dir, carried.build), carried.entry.file,
               {place.position for place in places}, self._version.why_not_rebuilt)
        if self._processes <= 0:
            with row_lists_checked():
                yield shard_index, rewrite_shard(*job)
            return
        if self._jobs is None:  # started on the first shard: a night without removals starts no process for it
            from shardsmith.shard_writer.shard_worker import build_pool

            self._jobs = JobsInHand(build_pool(self._config.files_dir, self._processes), SHARDS_IN_FLIGHT_PER_PROCESS)
        for index, outcome in self._jobs.send(shard_index, rewrite_in_writer_process, *job):
            yield index, accepted(outcome)

    def finish_bundle(self):
        if self._jobs is not None:
            yield from (in_global_window((index, accepted(outcome))) for index, outcome in self._jobs.all())

    def __getstate__(self):
        # The build's writer processes and the shards they still rewrite belong to this instance, never to a copy.
        return {**self.__dict__, "_jobs": None}


class RewriteShards(beam.PTransform):
    """RecordPlaces of removed records -> (shard index, ShardResult) per rewritten shard; runs only once the
    removals passed their check (`removed_lines`, a side input). The shards are rewritten into the night's
    build, `config`'s target, from the earlier builds of the same output folder; `processes`: the build's writer
    processes (0: none)."""

    def __init__(self, config: WriterConfig, version: CarriedVersion, processes: int = 0):
        super().__init__()
        if not isinstance(config.target, BuildTarget):
            raise TypeError("a night rewrites shards into a build of its output folder, not an unlocked folder")
        self._fn = RewriteShardFn(config, config.target.output_dir, version.for_stages(), processes)

    def expand(self, inputs):
        removed, removed_lines = inputs
        return (
            removed
            | "KeyByShard" >> beam.Map(lambda place: (place.shard, place))
            | "GroupByShard" >> beam.GroupByKey()
            | "RewriteShard" >> beam.ParDo(self._fn, beam.pvalue.AsSingleton(removed_lines))
        )
