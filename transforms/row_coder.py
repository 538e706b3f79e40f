"""How RowBatches (and ImageDigests, lists of the same kind) cross stage boundaries: one compressed pickle per list,
and a size estimate that does not encode it.

Beam measures every PCollection's mean element size by encoding a sample of its elements: on each worker the
first 10 elements of every output, then about 10 in each doubling (apache_beam/runners/worker/opcounters.py).
Rows travel in batches of up to ROWS_PER_BATCH, so a build of tens of thousands of rows has few enough elements
that nearly every batch is sampled, at every ParDo output it passes: with Beam's default coder each sample
pickles the whole batch to count its bytes (tests/transforms/test_row_coder.py counts the pickles a row takes in a real
build). RowBatchCoder encodes as the default coder does for a RowBatch (one pickle), and estimates a batch's size
from its first row.

A shard's placed rows, from placement to the shard writer, cross in SealedBatchCoder instead: encoded as a
RowBatch is, decoded into SealedBatches, which keep the pickle. The launcher hands them to its writer processes
without unpickling and pickling each row again, and holds about 150 bytes a waiting row instead of 750.

Only typed PCollections use them: with Beam's construction-time type checks off (pipeline/running/runner.py) no
output type is inferred, so the stages mark their batch outputs with `of_batches` and its kin.
"""

from __future__ import annotations

import pickle
import struct

import apache_beam as beam
from apache_beam.typehints import Any, Iterable, Tuple

from shardsmith.rows import ImageDigests, RowBatch, SealedBatch, sealed_bytes, unsealed


class RowBatchCoder(beam.coders.Coder):
    """A RowBatch as one pickle, compressed (`sealed_bytes`): the local runner holds a stage's input in
    several copies (shardsmith/rows/__init__.py, SealedBatch). Its size estimate is the first item's pickled size times
    the item count, before compression: a metric's input (Beam's MeanByteCount), never used to frame or split
    data."""

    def encode(self, batch: list) -> bytes:
        return sealed_bytes(batch)

    def decode(self, encoded: bytes) -> list:
        return unsealed(encoded)

    def estimate_size(self, batch: list) -> int:
        if not batch:
            return len(self.encode(batch))
        return len(pickle.dumps(batch[0], protocol=pickle.HIGHEST_PROTOCOL)) * len(batch)

    def is_deterministic(self) -> bool:
        return False

    def to_type_hint(self):
        return RowBatch

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))


class ImageDigestsCoder(RowBatchCoder):
    """ImageDigests (a shard's, or a hash range's) as RowBatchCoder codes a RowBatch."""

    def to_type_hint(self):
        return ImageDigests


class SealedBatchCoder(RowBatchCoder):
    """A batch of placed rows (a RowBatch, or a SealedBatch already) as its row count and one pickle, decoded
    into a SealedBatch: the rows stay pickled until iterated."""

    _COUNT = struct.Struct("<I")

    def encode(self, batch) -> bytes:
        sealed = batch if isinstance(batch, SealedBatch) else SealedBatch.of(batch)
        return self._COUNT.pack(sealed.count) + sealed.data

    def decode(self, encoded: bytes) -> SealedBatch:
        (count,) = self._COUNT.unpack_from(encoded)
        return SealedBatch(encoded[self._COUNT.size:], count)

    def estimate_size(self, batch) -> int:
        if isinstance(batch, SealedBatch):
            return self._COUNT.size + len(batch.data)
        return self._COUNT.size + super().estimate_size(batch)

    def to_type_hint(self):
        return SealedBatch


beam.coders.registry.register_coder(RowBatch, RowBatchCoder)
beam.coders.registry.register_coder(ImageDigests, ImageDigestsCoder)
beam.coders.registry.register_coder(SealedBatch, SealedBatchCoder)

KEYED_BATCHES = Tuple[Any, RowBatch]
GROUPED_BATCHES = Tuple[Any, Iterable[RowBatch]]


def of_batches(pcoll: beam.PCollection) -> beam.PCollection:
    """Marks `pcoll` as holding RowBatches, so it crosses stages in RowBatchCoder. Returns it."""
    pcoll.element_type = RowBatch
    return pcoll


def of_keyed_batches(pcoll: beam.PCollection, sealed: bool = False) -> beam.PCollection:
    """Marks `pcoll` as holding (key, RowBatch) pairs, a GroupByKey's input; `sealed`: batches of placed rows that
    cross as SealedBatches. Returns it."""
    pcoll.element_type = Tuple[Any, SealedBatch] if sealed else KEYED_BATCHES
    return pcoll


def of_grouped_batches(pcoll: beam.PCollection, sealed: bool = False) -> beam.PCollection:
    """Marks `pcoll` as holding (key, iterable of RowBatch), a GroupByKey's output; `sealed`: of SealedBatch.
    Returns it."""
    pcoll.element_type = Tuple[Any, Iterable[SealedBatch]] if sealed else GROUPED_BATCHES
    return pcoll


def of_digests(pcoll: beam.PCollection, keyed: bool = False, grouped: bool = False) -> beam.PCollection:
    """Marks `pcoll` as holding ImageDigests: alone, as (key, ImageDigests), or as (key, iterable of them)."""
    pcoll.element_type = (Tuple[Any, Iterable[ImageDigests]] if grouped else Tuple[Any, ImageDigests] if keyed
                          else ImageDigests)
    return pcoll
