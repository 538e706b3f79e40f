"""Images whose perceptual signatures are identical, handled as one: the bound that keeps `--near_duplicates`
linear on blank, single-colour or otherwise identical-looking images.

k images with one signature are k(k-1)/2 pairs at distance 0, all confirmed (a signature agrees with itself),
and every one of them shares every band bucket with the others: 1,000 black PNGs were 499,500 pairs, 11 GB and
15 minutes. So rows are first grouped by their whole signature. A group of at most MAX_EXPANDED_GROUP rows is
compared row by row as before (ordinary copies: a photo saved twice; the pairs and their listing are unchanged).
A bigger group is collapsed: one representative (the first by split, train first, then by manifest position)
is compared with the other signatures and stands for the group, the group itself is summarised (its size, its
rows per split, a few URIs), and its other rows (followers) are only counted and, with `drop`, judged from the
representative. Work is then O(rows) for grouping plus the banded comparison of distinct signatures.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from shardsmith.format.naming import SPLITS
from shardsmith.near_duplicates.near_duplicate_search import CAPPED_BUCKET_EXAMPLES, HashedImage, is_low_detail

# Rows with one signature that are still compared row by row: at most 120 pairs each, so pairs stay below
# 8 per image whatever the data. A photo saved under several names is a group of a few.
MAX_EXPANDED_GROUP = 16
MAX_LISTED_GROUPS = 20  # groups named in metadata.json (the largest); the counts cover all


def signature_key(image: HashedImage) -> tuple[int, bytes, bytes, int]:
    """The GroupByKey key of identical signatures (plain values: a deterministic key for any runner)."""
    s = image.signature
    return (s.phash, s.structure, s.colour, s.detail)


@dataclass(frozen=True)
class IdenticalGroup:
    """More than MAX_EXPANDED_GROUP rows with one signature, summarised."""

    representative: HashedImage  # compared with other signatures for the whole group
    size: int
    splits: tuple[tuple[str, int], ...]  # rows per split, train, validation, test first
    examples: tuple[str, ...]  # the first URIs by manifest position

    def sort_key(self) -> tuple:
        return (-self.size, self.representative.key)

    def to_dict(self) -> dict:
        signature = self.representative.signature
        return {"size": self.size, "splits": dict(self.splits), "low_detail": is_low_detail(signature, signature),
                "representative": self.representative.uri, "examples": list(self.examples)}


@dataclass(frozen=True)
class CollapsedRows:
    """What one signature's rows become: rows to compare, and for a collapsed group its summary and followers."""

    compared: list[HashedImage]
    group: IdenticalGroup | None = None
    followers: Iterable[HashedImage] = ()


def collapse_identical(rows: Callable[[], Iterable[HashedImage]]) -> CollapsedRows:
    """Rows of one signature (`rows()` iterates them again on each call: a GroupByKey's values) -> all of them
    to compare when there are at most MAX_EXPANDED_GROUP, else the representative (carrying the group's size),
    the group's summary and its other rows. Holds at most MAX_EXPANDED_GROUP + 1 rows, whatever the group's size."""
    held: list[HashedImage] = []
    size = 0
    first = None
    per_split: Counter = Counter()
    examples: list[tuple] = []  # the CAPPED_BUCKET_EXAMPLES smallest (key, URI) so far
    for row in rows():
        size += 1
        if size <= MAX_EXPANDED_GROUP + 1:
            held.append(row)
        per_split[row.split] += 1
        if first is None or row.pair_order() < first.pair_order():
            first = row
        examples = heapq.nsmallest(CAPPED_BUCKET_EXAMPLES, [*examples, (row.key, row.uri)])
    if size <= MAX_EXPANDED_GROUP:
        return CollapsedRows(held)
    representative = dataclasses.replace(first, identical_images=size)
    ordered = sorted(per_split.items(), key=lambda item: (_split_order(item[0]), item[0]))
    group = IdenticalGroup(representative, size, tuple(ordered), tuple(uri for _, uri in examples))
    return CollapsedRows([representative], group, (row for row in rows() if row.key != first.key))


def _split_order(split: str) -> int:
    return SPLITS.index(split) if split in SPLITS else len(SPLITS)
