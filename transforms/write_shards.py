"""Write each shard in one step: read its images in placement order, validate, encode, stream the
records to a temporary file and rename it to the final name (shardsmith/shard_writer/shard_file.py).

Why not `beam.io.WriteToTFRecord`: with a fixed shard count it deals records round-robin and writes them in
arrival order after a GroupByKey that carries the payload, so a label-sorted input gives label-sorted shards
and the image bytes pass through the shuffle (measured: 1.4 GB of JPEGs reached 7.5 GB peak RSS on the local
runner). Here only manifest rows are grouped; bytes are read once, here, and written once. The record format
(TFRecord framing with masked CRC32C) and the `-SSSSS-of-NNNNN` shard naming are the same as WriteToTFRecord's.

On a remote runner each worker writes the shards it is given in its own thread; the runner spreads shards
over workers. On the local runner, whose in_memory mode runs every step in one process, shards go to
`shard_writer_processes` lightweight processes (shardsmith/shard_writer/shard_worker.py), so writing uses every core;
with their default number, a small build (SMALL_BUILD_IMAGES, SMALL_BUILD_BYTES) is written in the runner's own
process, as `--writer_processes 0` does: starting the processes would cost more than writing it.

Guarantees: the bytes of a shard depend only on its rows and the seed; a retried or duplicated bundle
writes a temporary file of its own and renames identical bytes over the same final name, so readers never
see a partial file under a final name. Memory: per writer, one shard's rows plus the images in flight.
"""

from __future__ import annotations

import logging
from collections import deque
from concurrent.futures import Future

import apache_beam as beam

from shardsmith.rows import SealedBatch
from shardsmith.shard_writer.shard_file import ShardOutcome, write_shard_file
from shardsmith.shard_writer.split_shard import cut, join_parts, num_parts, write_part
from shardsmith.shard_writer.writer_config import WriterConfig
from transforms import ERRORS
from transforms.gather import in_global_windows_of
from transforms.metrics import count_written, rejected
from transforms.place import ShardPlan
from transforms.row_coder import of_digests

DIGESTS = "digests"
SIGNATURES = "signatures"  # --near_duplicates: lists of HashedImage, one per shard
# Shards handed to the writer processes beyond one each: keeps them busy without holding every shard's rows.
EXTRA_SHARDS_QUEUED_PER_PROCESS = 1
# Shards held back per writer process, the largest handed out first, so that the smallest are written last: a
# window that bounds the rows held, as EXTRA_SHARDS_QUEUED_PER_PROCESS does.
SHARDS_HELD_BACK_PER_PROCESS = 2
# With the default writer processes, a build that places at most this many images of at most this many source
# bytes is written in the runner's own process: starting the processes (a Python with Pillow each, 0.3 s of CPU,
# then their exit) took 0.5-1.0 s of a 3 s build of 124 images on 2 cores (tests/benchmarks/build_overhead.py),
# more than writing such a build in one process costs (256 photos of 88 KB: about 0.03 s with --validate header,
# 0.3 s with decode, by the per-image costs in docs/performance.md, "Where the time goes").
SMALL_BUILD_IMAGES = 256
SMALL_BUILD_BYTES = 16 << 20
_LOG = logging.getLogger("shardsmith")


class WriteShardFn(beam.DoFn):
    """((split, shard), lists of PlacedRows) -> ShardResult, with ErrorRows (tagged `errors`) for rejected
    images, the shard's list of ImageDigests (tagged `digests`) and, with --near_duplicates, of
    HashedImages (tagged `signatures`). Counts records_written_<split>,
    bytes_written_<split>, errors_load and image_bytes (transforms/metrics.py) as each shard's outputs leave.

    With `processes` > 0, shards are written by that many writer processes, the largest of those held back
    (SHARDS_HELD_BACK_PER_PROCESS) first, and their results come out as they finish (the rest in
    finish_bundle); otherwise each shard is written in process(). With `unless_small`,
    process() takes the build's ShardPlan as a side input, a small build (is_small) is written in process()
    too, and no more processes start than the build has shards. The writer pool is the build's
    (shard_worker.build_pool, by the build's folder): started by ReadManifest to parse a large manifest (with up
    to parallel_parse.PARSING_PROCESSES, grown here) or else in setup() (with `unless_small`, at the first shard
    of a build that is not small), closed in teardown() and never pickled (__getstate__)."""

    def __init__(self, config: WriterConfig, processes: int = 0, unless_small: bool = False):
        self._config = config
        self._processes = processes
        self._unless_small = unless_small
        self._pool = None
        self._pending: deque[Future] = deque()
        # Shards held back, not yet handed out: (-rows, split, shard, batches)
        self._waiting: list[tuple[int, str, int, list[SealedBatch]]] = []

    def setup(self):
        self._pool_decided = self._processes <= 0 or not self._unless_small
        if self._processes > 0 and not self._unless_small:
            self._start_pool(self._processes)

    def _start_pool(self, processes: int) -> None:
        from shardsmith.shard_writer.shard_worker import build_pool

        self._pool = build_pool(self._config.files_dir, processes)  # started as the manifest was read, or now

    def process(self, keyed_rows, plan: ShardPlan | None = None):
        (split, shard), dealt = keyed_rows
        if not self._pool_decided:
            self._pool_decided = True
            if not is_small(plan):
                self._start_pool(min(self._processes, num_shards(plan)))
        if self._pool is None:
            yield from _outputs(write_shard_file(self._config, split, shard, dealt))
            return
        batches = list(dealt)  # SealedBatches: handed to a writer process still pickled
        self._waiting.append((-sum(map(len, batches)), split, shard, batches))
        if len(self._waiting) > self._pool.processes * SHARDS_HELD_BACK_PER_PROCESS:
            self._waiting.sort(key=lambda waiting: waiting[:3])
            yield from self._submit(*self._waiting.pop(0)[1:])

    def _submit(self, split: str, shard: int, batches: list[SealedBatch]):
        """Hands a shard to the writer processes; yields the outputs of those that finished meanwhile (and of
        the oldest, while too many are queued)."""
        self._pending.append(self._pool.submit(write_shard_file, self._config, split, shard, batches))
        while self._pending and (
            self._pending[0].done() or len(self._pending) > self._pool.processes * (1 + EXTRA_SHARDS_QUEUED_PER_PROCESS)
        ):
            yield from _outputs(self._pending.popleft().result())

    def finish_bundle(self):
        """The shards held back, largest first: the last shards written, each by one process while the others may have
        none left, are the smallest seen (Graham's LPT order, over a window of held-back shards). The very last is cut
        into one part per writer process, written at once and joined (shardsmith/shard_writer/split_shard.py), so that
        no process writes it alone while the others wait. A shard's bytes do not depend on when it is written, nor on
        whether it was written in parts."""
        self._waiting.sort(key=lambda waiting: waiting[:3])
        last = self._waiting.pop() if self._waiting else None
        for _, split, shard, batches in self._waiting:
            yield from map(in_global_windows_of, self._submit(split, shard, batches))
        self._waiting = []
        split_last = None
        if last is not None:
            rows, split, shard, batches = -last[0], *last[1:]
            parts = num_parts(self._config, rows, self._pool.processes)
            if parts > 1:
                split_last = [self._pool.submit(write_part, self._config, split, shard, part)
                              for part in cut(batches, parts)]
            else:
                yield from map(in_global_windows_of, self._submit(split, shard, batches))
        while self._pending:
            yield from map(in_global_windows_of, _outputs(self._pending.popleft().result()))
        if split_last is not None:
            outcome = join_parts(self._config, [part.result() for part in split_last])
            yield from map(in_global_windows_of, _outputs(outcome))

    def teardown(self):
        if self._processes > 0:  # the build's pool, also when ReadManifest started it for a build written here
            from shardsmith.shard_writer.shard_worker import close_build_pool

            close_build_pool(self._config.files_dir)
        self._pool = None

    def __getstate__(self):
        # The writer processes and the shards they still write belong to this instance, never to a copy.
        return {**self.__dict__, "_pool": None, "_pending": deque(), "_waiting": []}


def is_small(plan: ShardPlan) -> bool:
    """Whether the build `plan` places is written faster in one process than by starting writer processes."""
    splits = plan.splits.values()
    return is_small_size(sum(s.num_examples for s in splits), sum(s.num_bytes for s in splits))


def is_small_size(num_images: int, num_bytes: int) -> bool:
    """Whether that many images of that many source bytes are written faster in one process (a build's shards,
    or a compaction's) than by starting writer processes."""
    return num_images <= SMALL_BUILD_IMAGES and num_bytes <= SMALL_BUILD_BYTES


def num_shards(plan: ShardPlan) -> int:
    """How many shards the build `plan` places writes: more writer processes than this would wait idle."""
    return sum(s.num_shards for s in plan.splits.values())


def _outputs(outcome: ShardOutcome):
    result = outcome.result
    _LOG.info("wrote %s shard %d of %d: %d records, %.1f MB, %d rejected", result.split, result.shard + 1,
              result.num_shards, result.num_examples, result.num_bytes / 1e6, len(outcome.errors))
    count_written(result, outcome.image_sizes, len(outcome.errors))
    for error in outcome.errors:
        yield rejected(error)
    if outcome.digests:
        yield beam.pvalue.TaggedOutput(DIGESTS, outcome.digests)
    if outcome.signatures:
        yield beam.pvalue.TaggedOutput(SIGNATURES, outcome.signatures)
    yield result


class WriteShards(beam.PTransform):
    """((split, shard), rows) groups -> ShardResults (`shards`), with `errors`, `digests` and `signatures`.
    `processes` > 0: that many writer processes; with `plan` (the one-element ShardPlan) as well, only when the
    build is not small (is_small), as for the default number of writer processes."""

    def __init__(self, config: WriterConfig, processes: int = 0, plan=None):
        super().__init__()
        self._config = config
        self._processes = processes
        self._plan = plan

    def expand(self, shard_groups):
        if self._plan is None or self._processes <= 0:
            write = beam.ParDo(WriteShardFn(self._config, self._processes))
        else:
            write = beam.ParDo(WriteShardFn(self._config, self._processes, unless_small=True),
                               beam.pvalue.AsSingleton(self._plan))
        written = shard_groups | "WriteShard" >> write.with_outputs(ERRORS, DIGESTS, SIGNATURES, main="shards")
        of_digests(written[DIGESTS])
        return written
