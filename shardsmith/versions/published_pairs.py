"""Near-duplicate candidates of an --incremental night in one band bucket: the night's new images against each
other and against the published version's records, never two published records again (they were compared when
one of them was new; a non-incremental `report` compares the whole version). The pure logic under
transforms/near_duplicates.py; the candidates are confirmed as a full build's are
(shardsmith/near_duplicates/near_duplicate_search.py `confirmed`).

Bounds, as a full build's bucket (near_duplicate_search.py):
- memory: a worker holds at most MAX_BUCKET_MEMBERS + 1 of a bucket's new images; its published records are read
  from the bucket's values (a GroupByKey's, iterated again: Dataflow streams them) at most PUBLISHED_AT_ONCE at a
  time, so a bucket holding millions of published records is never held;
- work: at most MAX_BUCKET_COMPARISONS hash pairs a bucket (new x published, plus new x new / 2: a full build's
  largest bucket, MAX_BUCKET_MEMBERS rows, compares as many), and at most MAX_BUCKET_CANDIDATES candidates, counted
  before any pair is formed. A bucket over either is reported as capped, as a full build's is.
A full build's bucket of n rows is capped past MAX_BUCKET_MEMBERS rows; a night's bucket of n new and p published
rows only past n * p comparisons, which n + p <= MAX_BUCKET_MEMBERS never reaches: a night compares at least what
a full build of the same rows would, pair for pair.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from shardsmith.near_duplicates.near_duplicate_search import (
    MAX_BUCKET_MEMBERS,
    HashedImage,
    NearPair,
    confirmed,
    pair_of,
)

MAX_BUCKET_COMPARISONS = MAX_BUCKET_MEMBERS * MAX_BUCKET_MEMBERS // 2  # hash pairs one bucket may cost: 50 million
PUBLISHED_AT_ONCE = 4096  # published records whose distances to the new images are taken in one numpy step
DISTANCES_AT_ONCE = 1 << 20  # and at most this many distances (one byte each) at once


@dataclass(frozen=True)
class NightBucket:
    """One bucket's new images (in key order, the first MAX_BUCKET_MEMBERS + 1 when there are more) and its
    counts."""

    new: list[HashedImage]
    num_new: int
    num_published: int

    @property
    def size(self) -> int:
        return self.num_new + self.num_published

    @property
    def comparisons(self) -> int:
        return self.num_new * self.num_published + self.num_new * (self.num_new - 1) // 2


def take_new(members: Iterable[HashedImage], cap: int = MAX_BUCKET_MEMBERS) -> NightBucket:
    """Holds at most `cap` + 1 new members while counting new and published ones."""
    new: list[HashedImage] = []
    num_new = num_published = 0
    for member in members:
        if member.published:
            num_published += 1
            continue
        num_new += 1
        if num_new <= cap + 1:
            new.append(member)
    return NightBucket(sorted(new, key=lambda m: m.key), num_new, num_published)


def _published_chunks(published: Iterable[HashedImage], num_new: int) -> Iterator[list[HashedImage]]:
    size = max(1, min(PUBLISHED_AT_ONCE, DISTANCES_AT_ONCE // max(1, num_new)))
    chunk: list[HashedImage] = []
    for member in published:
        chunk.append(member)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _within(new: list[HashedImage], published: Iterable[HashedImage], max_distance: int) -> Iterator:
    """(chunk of published records, their indices, the new images' indices, distances) of each chunk's
    candidates."""
    import numpy as np  # not at the top: shardsmith/settings/__init__.py reads the search's constants without numpy

    hashes = np.array([m.phash for m in new], dtype=np.uint64)
    for chunk in _published_chunks(published, len(new)):
        distances = np.bitwise_count(np.array([m.phash for m in chunk], dtype=np.uint64)[:, None] ^ hashes[None, :])
        rows, columns = np.nonzero(distances <= max_distance)
        if rows.size:
            yield chunk, rows, columns, distances[rows, columns]


def count_published_candidates(new: list[HashedImage], published: Callable[[], Iterable[HashedImage]],
                               max_distance: int) -> int:
    """How many (published record, new image) pairs of the bucket are within `max_distance` (all counted: the
    comparisons are bounded before this is called, and the count is then the same in every run)."""
    return sum(int(rows.size) for _, rows, _, _ in _within(new, published(), max_distance))


def confirmed_published_pairs(new: list[HashedImage], published: Callable[[], Iterable[HashedImage]],
                              max_distance: int) -> Iterator[NearPair]:
    """The (published record, new image) candidates that are near copies, as pairs."""
    for chunk, rows, columns, distances in _within(new, published(), max_distance):
        for row, column, distance in zip(rows.tolist(), columns.tolist(), distances.tolist(), strict=True):
            ok, similarity = confirmed(chunk[row].signature, new[column].signature)
            if ok:
                yield pair_of(chunk[row], new[column], int(distance), similarity)
