"""The values that flow between stages: manifest rows, placed rows, error rows, shard results.

A row carries everything needed to decide its fate (split, label, shard, position) without its image bytes;
bytes are read only by the shard writer and never become part of any of these values.

The package is the row model: these values (here), `row_identity` (what pairs a row with its record across nights)
and `failures` (why rows failed, in one line a person can act on). It imports only shardsmith.format and
shardsmith.images (which file names are images, for the failure hints): manifests, the shard writer, the stages and
the read side import it.
"""

from __future__ import annotations

import dataclasses
import operator
import pickle
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from shardsmith.format.metadata_schema import ShardEntry
from shardsmith.format.naming import SPLITS

# Rows travel between stages in lists of up to this many: Beam's per-element cost (tens of microseconds on
# the local runner, more than all the per-row work before the writer) is then paid once per batch.
ROWS_PER_BATCH = 1024
# The source of a class folder's rows is the folder's path ending in this (class_folders.py): an error then names
# its image file, FOLDER/URI, where a manifest's names its line.
FOLDER_SUFFIX = "/"
# zlib's level for a SealedBatch's pickle: level 1 packs placed rows' pickles 3-4x at a few hundred MB/s, which
# costs about a second of CPU per pass over a million rows; higher levels pack little more for several times that.
SEALED_COMPRESSION = 1


def pickled_as_field_values(cls):
    """Pickles instances as (class, field values). Rows cross every stage boundary pickled; for a slotted
    dataclass this is 2.6x faster than the default, which walks dataclasses.fields() in Python for each row."""
    values = operator.attrgetter(*cls.__match_args__)
    cls.__reduce__ = lambda self: (cls, values(self))
    return cls


def placing_label_id(label_ids: Iterable[int], image_counts: Sequence[int]) -> int:
    """The label a row with several labels is placed by: the one carried by the fewest images of the rows the
    vocabulary was taken from (`image_counts`, by id), lower id on ties. Rare labels are then spread over the
    shards as evenly as common ones. The build, verify and inspect all use this one rule."""
    return min(label_ids, key=lambda i: (image_counts[i] if image_counts else 0, i))


Box = tuple[float, float, float, float]  # (xmin, ymin, xmax, ymax), normalized to [0, 1] of width and height


@pickled_as_field_values
@dataclass(frozen=True, slots=True)
class Annotation:
    """What a row says about its image beyond one label: absent (None) for single-label classification.

    - multi_label: `labels` are the image's distinct labels; detection: one label per box, `boxes` aligned.
    - `lines`: every manifest line this image's row stands for (detection merges one line per box).
    - `label_ids`: ids of `labels`, set with the vocabulary.
    - `mask_uri`: segmentation: the resolved URI of the image's class mask.
    - `features`: extra columns, (name, typed value) in --feature order.
    - `invalid`: (reason, detail) when this row cannot be used (a bad box); its image's rows are then
      rejected together.
    """

    labels: tuple[str, ...] = ()
    boxes: tuple[Box, ...] = ()
    lines: tuple[int, ...] = ()
    label_ids: tuple[int, ...] = ()
    mask_uri: str = ""
    features: tuple[tuple[str, object], ...] = ()
    invalid: tuple[str, str] | None = None


@pickled_as_field_values
@dataclass(slots=True)
class ManifestRow:
    """One data row of a manifest (or one file of a folder), as read and resolved.

    `source_index` is the position of the manifest in the sorted list of inputs and `line` the 1-based line
    where the row starts; together they name the row uniquely and break hash ties deterministically.

    A value: its fields are never assigned after it is made (a stage makes a new row with `replaced`). It is not
    a frozen dataclass only because a frozen one's constructor costs several times as much
    (tests/benchmarks/row_costs.py), and a row is constructed about eight times on its way.
    """

    source: str
    source_index: int
    line: int
    uri: str  # as written in the manifest
    resolved_uri: str  # where the bytes are read from
    split: str  # canonical split, or "" while not yet assigned
    label: str  # the label; with several (multi_label, detection), the one placement stratifies by
    size: int = -1  # bytes, from a metadata lookup; -1 until looked up
    label_id: int = -1  # index into labels.txt; -1 until labels are known
    annotation: Annotation | None = None

    @property
    def lines(self) -> tuple[int, ...]:
        """The manifest lines this row stands for: its own, or every box line of a detection image."""
        return self.annotation.lines if self.annotation is not None and self.annotation.lines else (self.line,)

    def replaced(self, **changes) -> ManifestRow:
        """`dataclasses.replace(self, **changes)`, without walking the fields' definitions as replace() does each
        time: every row is replaced on its way (its size, its label id)."""
        values = list(_MANIFEST_ROW_VALUES(self))
        for name, value in changes.items():
            values[_MANIFEST_ROW_FIELD_INDEX[name]] = value
        return ManifestRow(*values)


class RowBatch(list):
    """Rows that travel together between stages (at most ROWS_PER_BATCH; ManifestRows, or PlacedRows once
    placed). A list of its own type, so that Beam's default coder, which encodes a plain list item by item (a
    pickle per row), pickles a batch in one call; and a batch of one kind of row pickles as the rows' field
    values, plain tuples (`_pickled_rows`), as do the shard jobs sent to the writer processes."""

    __slots__ = ()

    def __reduce__(self):
        return _pickled_rows(self, RowBatch)


class SealedBatch:
    """A batch of rows kept as its pickle, compressed: rows waiting in a GroupByKey of the local runner (a rank
    group's, a shard's, a hash range's digests), and a shard's rows between the launcher and the writer process
    that unpickles them. Iterating unpickles the rows (a writer, or a build written in one process); `len` is
    free, and pickling a SealedBatch (a writer's job) copies its bytes without unpickling them.
    Memory: the local runner holds a stage's input in about three copies while the stage runs (its grouped
    output, the data channel's messages, the decoded groups), so a row's bytes count several times over: a
    placed row's pickle is about 150 bytes, compressed (zlib level 1, SEALED_COMPRESSION) a third to a quarter
    of it, and its objects about 750 bytes."""

    __slots__ = ("data", "count")

    def __init__(self, data: bytes, count: int):
        self.data = data
        self.count = count

    @classmethod
    def of(cls, batch: Sequence) -> SealedBatch:
        rows = batch if isinstance(batch, RowBatch) else RowBatch(batch)
        return cls(sealed_bytes(rows), len(rows))

    def rows(self) -> RowBatch:
        return unsealed(self.data)

    def __iter__(self):
        return iter(self.rows())

    def __len__(self) -> int:
        return self.count

    def __reduce__(self):
        return SealedBatch, (self.data, self.count)


@pickled_as_field_values
@dataclass(slots=True)
class PlacedRow:
    """A row whose split, label id, shard and order inside the shard are fixed. Still no image bytes. A value,
    never assigned after it is made, as a ManifestRow is."""

    row: ManifestRow
    shard: int
    num_shards: int
    order_key: tuple[int, int, int]  # sort key inside the shard: (order hash, source_index, line)


@dataclass(frozen=True)
class ErrorRow:
    """A row that did not become a record, with the stage that rejected it and a reason a person reads."""

    source: str
    line: int
    uri: str
    split: str
    label: str
    stage: str
    reason: str
    detail: str = ""
    other_lines: tuple[int, ...] = ()  # further lines of the same image (detection), rejected with it

    @classmethod
    def for_row(cls, row: ManifestRow, stage: str, reason: str, detail: str = "") -> ErrorRow:
        lines = row.lines
        return cls(row.source, lines[0], row.uri, row.split, row.label, stage, reason, detail, lines[1:])

    def per_line(self) -> list[ErrorRow]:
        """One ErrorRow per manifest line: errors.jsonl and the accounting count lines, not images."""
        if not self.other_lines:
            return [self]
        return [dataclasses.replace(self, line=line, other_lines=()) for line in (self.line, *self.other_lines)]

    def sort_key(self) -> tuple:
        return (self.source, self.line, self.uri, self.stage, self.reason)

    def to_dict(self) -> dict:
        fields = dataclasses.asdict(self)
        del fields["other_lines"]
        return fields


@dataclass(frozen=True)
class ShardResult:
    """What the writer reports for one finished shard file."""

    split: str
    shard: int
    num_shards: int
    file: str  # base name inside the output folder
    num_examples: int
    num_bytes: int  # size of the shard file as written
    label_counts: dict[str, int] = field(default_factory=dict)
    num_rows: int = -1  # manifest lines its records stand for (detection: one per box); -1: one per record
    crc32c: str = ""  # the file's checksum as written, computed while writing it (format/file_checksum.py)
    first_key: str | None = None  # image/key/sha256 of its first record; None when it holds none
    index_file: str | None = None  # its record index's file name, beside it; None for gzip shards (no index)

    def entry(self) -> ShardEntry:
        """The shard's entry in metadata.json."""
        return ShardEntry(file=self.file, num_examples=self.num_examples, num_bytes=self.num_bytes,
                          label_counts=self.label_counts, crc32c=self.crc32c, first_key=self.first_key,
                          index=self.index_file)


class ImageDigests(list):
    """A list of ImageDigests that travels as one element (a shard's, or a hash range's): a list of its own type
    for the reason RowBatch is one, so that Beam's default coder pickles it in one call, not one per image, and
    as field values (`_pickled_rows`)."""

    __slots__ = ()

    def __reduce__(self):
        return _pickled_rows(self, ImageDigests)


@pickled_as_field_values
@dataclass(slots=True)
class ImageDigest:
    """The SHA-256 of one written (or, with --on_duplicate drop, about to be written) image, and whose it is. A
    value, never assigned after it is made, as a ManifestRow is (one is made per image, and again each time a
    batch of them is unpickled)."""

    sha256: str
    split: str
    uri: str
    source_index: int
    line: int

    def keep_order(self) -> tuple:
        """Which copy of identical images is kept: the earliest split (train, then validation, then test, so a
        leaked copy leaves the evaluation splits), then the first in the inputs."""
        return (SPLITS.index(self.split), self.source_index, self.line, self.uri)


# Each row class a batch pickles as field values, and the getter of its fields. Unpickling a batch calls the
# classes' constructors (`_unpickled_rows`). Each row pickled on its own (`pickled_as_field_values`) costs more,
# most of it in the reduce protocol's calls per object (tests/benchmarks/row_costs.py).
ROW_VALUES = {cls: operator.attrgetter(*cls.__match_args__) for cls in (ManifestRow, ImageDigest)}
_MANIFEST_ROW_VALUES = operator.attrgetter(*ManifestRow.__match_args__)  # replaced()'s, apart from pickling's
_MANIFEST_ROW_FIELD_INDEX = {name: index for index, name in enumerate(ManifestRow.__match_args__)}


def _pickled_rows(batch: list, batch_type: type) -> tuple:
    """`batch`'s pickle (a __reduce__ value): when every item is a ManifestRow, a PlacedRow or an ImageDigest
    (one class), the items' field values as tuples, a PlacedRow's row included; otherwise the items themselves."""
    kind = type(batch[0]) if batch else None
    if kind is None or any(type(item) is not kind for item in batch):
        return batch_type, (list(batch),)
    if kind is PlacedRow:
        row_values = ROW_VALUES[ManifestRow]
        return _unpickled_rows, (batch_type, kind, [(row_values(p.row), p.shard, p.num_shards, p.order_key)
                                                    for p in batch])
    values = ROW_VALUES.get(kind)
    if values is None:
        return batch_type, (list(batch),)
    return _unpickled_rows, (batch_type, kind, list(map(values, batch)))


def _unpickled_rows(batch_type: type, kind: type, values: list[tuple]) -> list:
    if kind is PlacedRow:
        return batch_type(PlacedRow(ManifestRow(*row), shard, num_shards, order_key)
                          for row, shard, num_shards, order_key in values)
    return batch_type(kind(*row) for row in values)


def sealed_bytes(value) -> bytes:
    """`value`'s pickle, compressed (SEALED_COMPRESSION): how a batch crosses a stage boundary or waits sealed."""
    return zlib.compress(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL), SEALED_COMPRESSION)


def unsealed(data: bytes):
    """The value `sealed_bytes` made `data` from."""
    return pickle.loads(zlib.decompress(data))
