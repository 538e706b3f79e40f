"""Near-duplicate candidates without all pairs, and the test that confirms them: the pure logic under
transforms/near_duplicates.py.

Banding (pigeonhole): a HASH_BITS-bit hash is cut into `max_distance + 1` bands of consecutive bits; two hashes
within Hamming distance d differ in at most d bits, so at least one of the d+1 bands is identical in both. Rows
that share (band index, band value) are candidates; each candidate pair gets its exact distance, and only
pairs within `max_distance` are kept. A pair found in several bands is the same NearPair (same keys, same
order), so dropping repeats by `pair_key` is deterministic.

Confirmation: a pHash distance alone pairs many distinct low-detail images (dark corners, blank walls, star
fields: measured in docs/near_duplicates.md). A candidate within the distance is a pair only when the
signatures' low-frequency structure agrees (cosine of the DCT coefficients at least MIN_STRUCTURE_SIMILARITY)
and so does their coarse colour (`colours_agree`). Both are unchanged by resizing and re-encoding, and by
design by brightness and (within the tolerance) contrast changes. The less texture a picture has, the less its
hash and structure say about it: two patches of sky or wall with an edge in the same corner hash alike and share
their low frequencies. When either image is low-detail (fewer than LOW_DETAIL_BLOCKS textured blocks), the pair
must agree more closely: structure at least LOW_DETAIL_MIN_STRUCTURE_SIMILARITY. Such pairs are also flagged
`low_detail`, for review.

Degenerate buckets (every all-black or all-white image has the same hash, so the same value in every band) are
not expanded: a bucket holding more than MAX_BUCKET_MEMBERS rows is reported (its band, size and a few URIs)
and skipped, so memory per bucket is bounded by MAX_BUCKET_MEMBERS rows of a few dozen bytes, and the pairs
compared per bucket by MAX_BUCKET_MEMBERS^2 / 2.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from shardsmith.format.naming import SPLITS
from shardsmith.near_duplicates.perceptual_hash import HASH_BITS, ImageSignature

# Cosine of two signatures' low-frequency DCT coefficients below which a candidate is not a near duplicate.
MIN_STRUCTURE_SIMILARITY = 0.9
# Opponent colour (over mean brightness) two copies' quarters may differ by: this much, plus a share of the
# stronger colour, since a contrast change of x0.7-x1.3 scales colours.
COLOUR_TOLERANCE = 0.1
COLOUR_RELATIVE_TOLERANCE = 0.5
# A pair is flagged low_detail, and confirmed more strictly, when either image has fewer textured blocks (of 16)
# than this.
LOW_DETAIL_BLOCKS = 12
# The structure cosine a low-detail pair needs: measured to cut false pairs between patches of sky and wall by
# three quarters for a point of 5% crop recall on photos (docs/near_duplicates.md).
LOW_DETAIL_MIN_STRUCTURE_SIMILARITY = 0.97
# Rows in one band bucket that are compared pairwise (vectorised Hamming distances, a few MB of rows); a bigger
# bucket is reported as capped and not expanded.
MAX_BUCKET_MEMBERS = 10_000
# Candidates (pairs within the distance) one bucket may hold before any is formed or confirmed; a bucket with
# more is dense with distinct look-alikes (near-blank frames, noise) and is reported as capped like a full one.
# Random hashes give a few dozen in a full bucket; identical signatures never get here (identical_groups.py).
MAX_BUCKET_CANDIDATES = 100_000
CAPPED_BUCKET_EXAMPLES = 3  # URIs named per capped bucket in metadata.json


@dataclass(frozen=True, slots=True)
class HashedImage:
    """One image's perceptual signature and whose it is: what leaves the writer (never pixels)."""

    signature: ImageSignature
    split: str
    label: str
    uri: str
    source_index: int
    line: int
    identical_images: int = 1  # > 1: the representative of that many rows with this signature (identical_groups.py)
    # A record of the published version an --incremental night adds to (its signature from its row list): the
    # build whose folder holds it and its generation; "" and 0 for a row of this build.
    build: str = ""
    generation: int = 0

    @property
    def published(self) -> bool:
        return bool(self.build)

    @property
    def phash(self) -> int:
        return self.signature.phash

    @property
    def key(self) -> tuple[int, int, str]:
        """Names the row uniquely (manifest position, then URI) and orders rows deterministically."""
        return (self.source_index, self.line, self.uri)

    def pair_order(self) -> tuple:
        """Which of two copies comes first in a pair: the earlier split (train, validation, test), then the key."""
        return (SPLITS.index(self.split) if self.split in SPLITS else len(SPLITS), self.key)

    def to_dict(self) -> dict:
        """A pair's side in near_duplicates.jsonl; a group's representative also says how many rows it stands for."""
        side = {"uri": self.uri, "split": self.split, "label": self.label, "source_index": self.source_index,
                "line": self.line}
        if self.published:
            side["published"] = {"build": self.build, "generation": self.generation}
        return side | ({"identical_images": self.identical_images} if self.identical_images > 1 else {})


@dataclass(frozen=True, slots=True)
class NearPair:
    distance: int
    first: HashedImage  # the earlier split (the copy `drop` keeps)
    second: HashedImage
    similarity: float = 1.0  # the structure cosine that confirmed the pair

    @property
    def low_detail(self) -> bool:
        """Either image has little texture: such pairs are the likeliest to be distinct pictures."""
        return is_low_detail(self.first.signature, self.second.signature)

    @property
    def pair_key(self) -> tuple:
        return (self.first.key, self.second.key)

    def sort_key(self) -> tuple:
        """The order pairs are listed in: closest first, then by the rows' keys."""
        return (self.distance, self.first.key, self.second.key)

    @property
    def splits(self) -> str:
        """`train-test`, `train-validation`, `validation-test`, or `within <split>`."""
        if self.first.split == self.second.split:
            return f"within {self.first.split}"
        return f"{self.first.split}-{self.second.split}"

    @property
    def labels_differ(self) -> bool:
        return self.first.label != self.second.label

    def to_dict(self) -> dict:
        return {
            "distance": self.distance,
            "similarity": round(self.similarity, 3),
            "low_detail": self.low_detail,
            "splits": self.splits,
            "labels_differ": self.labels_differ,
            "first": self.first.to_dict(),
            "second": self.second.to_dict(),
        }


def hamming(a: int, b: int) -> int:
    return (a ^ b).bit_count()


def band_edges(num_bands: int, bits: int = HASH_BITS) -> list[tuple[int, int]]:
    """(shift, width) of each band: `bits` cut into `num_bands` runs of consecutive bits, as even as can be."""
    if not 1 <= num_bands <= bits:
        raise ValueError(f"num_bands must be between 1 and {bits}, not {num_bands}")
    edges, start = [], 0
    for i in range(num_bands):
        width = bits // num_bands + (1 if i < bits % num_bands else 0)
        edges.append((start, width))
        start += width
    return edges


def bands(phash: int, num_bands: int) -> list[tuple[int, int]]:
    """(band index, band value) for each band of the hash: the GroupByKey keys."""
    return [(i, (phash >> shift) & ((1 << width) - 1)) for i, (shift, width) in enumerate(band_edges(num_bands))]


def num_bands_for(max_distance: int) -> int:
    """Bands that guarantee a shared band for every pair within `max_distance` (pigeonhole)."""
    return max_distance + 1


@dataclass(frozen=True)
class CappedBucket:
    band: int
    value: int
    size: int
    examples: tuple[str, ...]  # the first few URIs by key
    candidates: int = -1  # > MAX_BUCKET_CANDIDATES: capped for its candidates (counted up to there), not its size
    published: int = -1  # an --incremental night's bucket: how many of `size` are published records

    def to_dict(self) -> dict:
        counted = {"candidates": self.candidates} if self.candidates >= 0 else {}
        counted |= {"published": self.published} if self.published >= 0 else {}
        return {"band": self.band, "value": self.value, "size": self.size} | counted | {"examples": list(self.examples)}


def take_bucket(members: Iterable[HashedImage], cap: int = MAX_BUCKET_MEMBERS) -> tuple[list[HashedImage], int]:
    """Holds at most `cap` + 1 members while counting them all; returns (members if within the cap else the
    first few, size)."""
    held: list[HashedImage] = []
    size = 0
    for member in members:
        size += 1
        if size <= cap + 1:
            held.append(member)
    if size > cap:
        return sorted(held, key=lambda m: m.key)[:CAPPED_BUCKET_EXAMPLES], size
    return held, size


def pair_of(a: HashedImage, b: HashedImage, distance: int, similarity: float = 1.0) -> NearPair:
    first, second = sorted((a, b), key=HashedImage.pair_order)
    return NearPair(distance, first, second, similarity)


def structure_similarity(a: ImageSignature, b: ImageSignature) -> float:
    """Cosine of the two signatures' low-frequency DCT coefficients: 1 for copies, lower for other pictures."""
    import numpy as np  # not at the top: a shard writer imports this module (HashedImage) without numpy

    u, v = a.structure_vector(), b.structure_vector()
    norms = float(np.linalg.norm(u) * np.linalg.norm(v))
    if norms == 0:  # a flat image has no structure to compare: only another flat one matches it
        return 1.0 if not u.any() and not v.any() else 0.0
    return float(u @ v) / norms


def colours_agree(a: ImageSignature, b: ImageSignature) -> bool:
    """Every quarter's opponent colour within COLOUR_TOLERANCE plus COLOUR_RELATIVE_TOLERANCE of the stronger."""
    import numpy as np

    u, v = a.colour_cells(), b.colour_cells()
    strength = np.maximum(np.linalg.norm(u, axis=1), np.linalg.norm(v, axis=1))
    return bool((np.linalg.norm(u - v, axis=1) <= COLOUR_TOLERANCE + COLOUR_RELATIVE_TOLERANCE * strength).all())


def is_low_detail(a: ImageSignature, b: ImageSignature) -> bool:
    return min(a.detail, b.detail) < LOW_DETAIL_BLOCKS


def confirmed(a: ImageSignature, b: ImageSignature) -> tuple[bool, float]:
    """Whether two signatures within the pHash distance are near copies: (yes or no, structure similarity).
    Low-detail pairs must agree more closely (the module's docstring says why)."""
    similarity = structure_similarity(a, b)
    needed = LOW_DETAIL_MIN_STRUCTURE_SIMILARITY if is_low_detail(a, b) else MIN_STRUCTURE_SIMILARITY
    return similarity >= needed and colours_agree(a, b), similarity


@dataclass(frozen=True)
class BucketCandidates:
    members: list[HashedImage]  # in key order
    found: list[tuple[int, object, object]]  # (row, later rows within the distance, their distances): numpy arrays
    count: int  # candidates found; counting stops past the limit, and `found` is then empty

    def over(self, limit: int | None) -> bool:
        return limit is not None and self.count > limit


def bucket_candidates(members: list[HashedImage], max_distance: int,
                      limit: int | None = MAX_BUCKET_CANDIDATES) -> BucketCandidates:
    """The bucket's pairs within `max_distance`, as indices, counted before any pair is formed or confirmed.
    Hamming distances are taken a row against the rest at once (numpy), so a full bucket costs
    MAX_BUCKET_MEMBERS^2 / 2 popcounts, not as many Python steps; past `limit` candidates it stops."""
    import numpy as np

    members = sorted(members, key=lambda m: m.key)
    hashes = np.array([m.phash for m in members], dtype=np.uint64)
    found, count = [], 0
    for i in range(len(members)):
        distances = np.bitwise_count(hashes[i + 1:] ^ hashes[i])
        within = np.flatnonzero(distances <= max_distance)
        if within.size:
            count += int(within.size)
            if limit is not None and count > limit:
                return BucketCandidates(members, [], count)
            found.append((i, within, distances[within]))
    return BucketCandidates(members, found, count)


def confirmed_pairs(candidates: BucketCandidates) -> Iterator[NearPair]:
    """The candidates that are near copies (`confirmed`), as pairs, in a deterministic order."""
    members = candidates.members
    for i, within, distances in candidates.found:
        a = members[i]
        for offset, distance in zip(within, distances, strict=True):
            b = members[i + 1 + int(offset)]
            if a.key == b.key:
                continue
            ok, similarity = confirmed(a.signature, b.signature)
            if ok:
                yield pair_of(a, b, int(distance), similarity)


def pairs_in_bucket(members: list[HashedImage], max_distance: int) -> Iterator[NearPair]:
    """Every confirmed pair of distinct rows in one bucket within `max_distance`, in a deterministic order."""
    return confirmed_pairs(bucket_candidates(members, max_distance, limit=None))


def leaked_copy(pair: NearPair) -> HashedImage | None:
    """The row `--near_duplicates drop` turns into an error: the validation or test copy of a training image;
    None for pairs without a training copy, or within one split. A published record (an --incremental night's
    pair with the version it adds to) is never dropped: of a new image and a published one, the new one is the
    copy, whichever split it is in."""
    if pair.first.split != "train" or pair.second.split not in ("validation", "test"):
        return None
    if not pair.second.published:
        return pair.second
    return None if pair.first.published else pair.first


def kept_side(pair: NearPair, copy: HashedImage) -> HashedImage:
    """The other side of a pair whose `leaked_copy` is `copy`."""
    return pair.second if copy is pair.first else pair.first


def drop_reason(kept_uri: str, distance: int, kept_split: str = "train", kept_build: str = "") -> str:
    """What errors.jsonl says of a dropped copy, beside the reason `near duplicate dropped`."""
    published = f", published in build {kept_build}" if kept_build else ""
    return f"near duplicate of {kept_uri} in {kept_split}{published} (distance {distance})"
