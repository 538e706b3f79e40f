"""`shardsmith compact OUT`: the published version whose generations are rewritten into one balanced set of
shards per split, from the shards' own records. Beam-free: the launcher (pipeline/commands/compact.py) makes a
`CompactionSource` from metadata.json under the folder's lock; the stages
(transforms/versions/compact_version.py) turn each source shard's row list into ManifestRows (`record_rows`),
place them with the build's own PlaceRows, and copy each placed record (shardsmith/versions/record_copy.py).

Why the result is a full build's: placement depends only on each row's (split, URI as written, label id, image
size) and the seed, and a record's bytes only on its row and its image; the row lists hold the first four, the
recorded options the seed and shard count, the records themselves the bytes. So the compacted shards are the
bytes a plain `shardsmith build` writes from the manifest that lists the version's rows in version order (split
by split, shard by shard, record by record, after one header line), given `--label_file` with the version's
labels in id order and the recorded --seed and --num_shards (or --target_shard_mb).

Exceptions, where that manifest is not the one the rows first came from: ties of the placement hash, i.e. a URI
repeated within a split, are broken by the rows' manifest lines (`rank_key`), here their lines in that version
order; and a row with several labels (multi_label, detection) is placed by its rarest label, counted over the
rows the vocabulary was taken from (`placing_label_id`), which for a full build of the version's rows can be
another label than the one its record was first placed by (the row lists keep that one). With --image_mode
path a record holds its image's resolved path: the full build matches where it resolves URIs to the same paths.

A compaction row is a ManifestRow whose `resolved_uri` names its record, not an image (`RecordRef`): the
writer reads that record, nothing else, at its offset in the source shard (its index file says where). A gzip
shard has no index and cannot be read at an offset: it is first streamed once into an uncompressed temporary
copy in the compaction's build folder (`unpack`), read from there, and removed before the version is published.
Memory: one source shard's row list and index per reader, and the rows of ROWS_PER_READ_JOB records.

Row lists are input: each is counted against its shard's entry in metadata.json before its rows are placed, and
the writer checks each record it copies against its line (shardsmith/versions/row_check.py), so a row list that does
not describe its shard fails the compaction before anything is published. A lost row list is rebuilt from the
shard's records where they hold it exactly.
"""

from __future__ import annotations

import gzip
import json
import logging
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace

from shardsmith import storage
from shardsmith.errors import UsageError
from shardsmith.format.metadata_schema import Metadata, ShardEntry
from shardsmith.format.naming import TEMP_PREFIX, index_file_name, join, row_list_name, shard_generation
from shardsmith.format.record_file import RecordFileFormat, record_file
from shardsmith.format.record_index import RecordIndex
from shardsmith.format.row_list import ListedRow, RowListError, parse_row_list
from shardsmith.output_folder import build_dir, dataset_dir, shard_file_path
from shardsmith.placement import label_bucket_bits, rank_groups
from shardsmith.rows import ROWS_PER_BATCH, ManifestRow, RowBatch, SealedBatch
from shardsmith.settings import PlacementSettings
from shardsmith.shard_writer.shard_output import ShardOutput
from shardsmith.versions import row_check
from shardsmith.versions.row_check import Refused

# The canonical manifest's first data row is its line 2 (line 1: its header).
FIRST_DATA_LINE = 2
# Of a row list's SHA-256, the hexadecimal digits a compaction row carries through placement to check its record
# by: a whole hash is 64 digits that barely compress, and about half of a placed row's bytes in the local runner's
# GroupByKeys (tests/benchmarks/launcher_memory.py); 8 tell a wrong line from its record but once in 2^32.
SHA256_CHECK_CHARS = 8
# Records whose row lists a writer process reads in one job (`keyed_record_rows`): whole source shards, taken
# together until they hold this many, so that a rank group's piece from one job holds tens of rows, not a few.
ROWS_PER_READ_JOB = 1 << 15
_LOG = logging.getLogger("shardsmith")


@dataclass(frozen=True)
class SourceShard:
    """One shard of the version being compacted: its split, its path, the folder of the build holding it (its
    row list is there) and its entry; `first_line`: its first record's line in the canonical manifest."""

    split: str
    path: str
    folder: str
    entry: ShardEntry
    first_line: int


@dataclass(frozen=True)
class CompactionSource:
    """The published version a compaction rewrites, and the placement its full build would use."""

    output_dir: str
    version: str  # its build id
    metadata: Metadata
    shards: tuple[SourceShard, ...]
    placement: PlacementSettings

    @property
    def why_not_rebuilt(self) -> str:
        """Why a lost row list cannot be rebuilt from its shard's records ("" where it can)."""
        return row_check.unrecoverable(self.metadata.task_or_default, (self.metadata.options or {}).get("features"))

    @property
    def file_format(self) -> RecordFileFormat:
        """The record file the version's shards are (metadata.json's `format`)."""
        return record_file(self.metadata.format)

    def for_jobs(self) -> CompactionSource:
        """This source as a writer process's job takes it: metadata.json without its splits and the shards'
        entries without their label counts (what reading a row list never looks at; a 1M-row version's are 0.8
        MB, pickled into every job)."""
        return replace(self, metadata=replace(self.metadata, splits={}),
                       shards=tuple(replace(shard, entry=replace(shard.entry, label_counts={}))
                                    for shard in self.shards))

    def label_bits(self) -> dict[tuple[str, str], int]:
        """Each (split, label)'s rank-hash bits (shardsmith/placement.py), from the records metadata.json counts:
        they only bound the rows one worker ranks at a time, never where a row goes."""
        counts: Counter[tuple[str, str]] = Counter()
        for shard in self.shards:
            for label, count in (shard.entry.label_counts or {}).items():
                counts[(shard.split, label)] += count
        return label_bucket_bits(counts.items())

    @property
    def num_rows(self) -> int:
        """The manifest lines the version's records stand for (detection: one per box)."""
        metadata = self.metadata
        return metadata.num_example_rows if metadata.num_example_rows is not None else metadata.num_examples or 0


def compaction_source(output_dir: str, published: Metadata) -> CompactionSource:
    """The version `published` (output_dir's metadata.json, read under the lock) as a compaction's input.
    UsageError, in one line, for a version in a single generation (a full build, or one from before builds
    listed their rows)."""
    version = published.build_id or str(published.build_dir).rsplit("/", 1)[-1]
    if published.incremental is None:
        raise UsageError(f"{output_dir}'s published version {version} was built before builds listed their rows, "
                         "in one generation: nothing to compact")
    if published.incremental.generations <= 1:
        raise UsageError(f"{output_dir}'s published version {version} is in one generation already: nothing to "
                         "compact")
    folder = dataset_dir(output_dir, published)
    shards, line = [], FIRST_DATA_LINE
    for split, entry in published.all_shards():
        holder = folder if entry.build is None else build_dir(output_dir, entry.build)
        shards.append(SourceShard(split, shard_file_path(folder, entry), holder, entry, line))
        line += entry.num_examples or 0
    return CompactionSource(output_dir, version, published, tuple(shards), _placement(published))


def most_generations(published: Metadata) -> int:
    """The most generations any one split's shards come from (`--compact_after K` compacts above K)."""
    return max((len({shard_generation(shard.file) for shard in split.shards}) for split in published.splits.values()),
               default=0)


def _placement(published: Metadata) -> PlacementSettings:
    """The version's recorded --seed, --num_shards and --target_shard_mb (as its builds placed rows)."""
    options = published.options or {}
    defaults = PlacementSettings()
    return PlacementSettings(
        seed=published.seed if published.seed is not None else defaults.seed,
        split_ratios=tuple(options.get("split_ratios", defaults.split_ratios)),
        num_shards=tuple((options.get("num_shards") or {}).items()),
        target_shard_mb=options.get("target_shard_mb", defaults.target_shard_mb),
    )


@dataclass(frozen=True)
class RecordRef:
    """Where a compaction row's record is: its source shard (index into `CompactionSource.shards`), its framed
    bytes' offset and length there (its index file's line), and the row list's identity, line count and
    perceptual signature (text; "" for none), which the compacted row list keeps, and the first
    SHA256_CHECK_CHARS digits of its image SHA-256 ("" where it lists none): the record holds the whole hash,
    which the writer checks against them and lists (record_copy.py)."""

    shard: int
    offset: int
    length: int
    lines: int
    identity: str
    sha256_start: str = ""
    position: int = 0  # the record's place in its source shard: its row list's line is position + 1
    signature: str = ""

    def text(self) -> str:
        return json.dumps([self.shard, self.offset, self.length, self.lines, self.identity, self.sha256_start,
                           self.position, self.signature])

    @classmethod
    def of(cls, row: ManifestRow) -> RecordRef:
        return cls(*json.loads(row.resolved_uri))


def readable_path(source: CompactionSource, shard_index: int, files_dir: str) -> str:
    """Where the records of a source shard are read at their offsets: the shard itself, or, for a gzip shard
    (whose offsets cannot be sought), its uncompressed copy in the compaction's build folder (`unpack`)."""
    if source.metadata.compression_or_default == "none":
        return source.shards[shard_index].path
    return join(files_dir, f"{TEMP_PREFIX}unpacked-{shard_index:05d}.{source.file_format.file_suffix}")


def unpack(path: str, target: str, file_format: RecordFileFormat) -> RecordIndex:
    """Writes the records of gzip shard `path` uncompressed to `target` (a temporary file of the compaction's
    build folder, listed in its record, removed before it publishes); returns their index. Both CRCs of each
    record are checked as it is read; memory: one record."""
    output = ShardOutput(storage.parent(target), target.rsplit("/", 1)[-1], "none")
    index = RecordIndex()
    try:
        with output.open_temporary() as out, storage.open_read(path, buffered=True) as raw:
            for record in file_format.iter_records(gzip.GzipFile(fileobj=raw, mode="rb")):
                head, tail = file_format.frame(record)
                out.write(head)
                out.write(record)
                out.write(tail)
                index.add(len(record))
    except BaseException:
        output.discard_temporary()
        raise
    output.publish()
    return index


def record_rows(source: CompactionSource, shard_index: int, files_dir: str) -> Iterator[RowBatch]:
    """The rows of one source shard, in record order, in RowBatches: split, URI, label, label id (the label's
    index in the version's labels) and image size from its row list, line from the canonical manifest, and the
    record's place from its index file (a gzip shard's: from its uncompressed copy, `unpack`, made here).
    RowListError when the row list, the records and metadata.json do not agree on the shard's records, or a
    row's label is not one of the version's."""
    shard = source.shards[shard_index]
    list_path = row_list_path(source, shard_index)
    listed = _row_list(source, shard_index)
    row_check.check_count(list_path, len(listed), shard.entry.file, shard.entry.num_examples, source.why_not_rebuilt)
    readable = readable_path(source, shard_index, files_dir)
    if readable != shard.path:
        index = unpack(shard.path, readable, source.file_format)
    else:
        index_path = join(storage.parent(shard.path), shard.entry.index or index_file_name(shard.entry.file))
        index = RecordIndex.parse(_required(index_path, "index file"), index_path)
    if len(index) != shard.entry.num_examples:
        raise RowListError(f"{shard.path}: metadata.json counts {shard.entry.num_examples} records, its index file "
                           f"{len(index)}")
    label_ids = {label: i for i, label in enumerate(source.metadata.labels)}
    batch = RowBatch()
    for position, (row, (offset, length)) in enumerate(zip(listed, index, strict=True)):
        if row.label not in label_ids:
            raise RowListError(f"{shard.path} record {position} has label {row.label!r}, not one of the version's")
        ref = RecordRef(shard_index, offset, length, row.lines, row.identity, row.sha256[:SHA256_CHECK_CHARS],
                        position, row.signature)
        batch.append(ManifestRow(shard.path, 0, shard.first_line + position, row.uri, ref.text(), shard.split,
                                 row.label, row.size, label_ids[row.label]))
        if len(batch) == ROWS_PER_BATCH:
            yield batch
            batch = RowBatch()
    if batch:
        yield batch


@dataclass(frozen=True)
class KeyedRows:
    """Some source shards' rows, keyed for placement: one SealedBatch per rank group (in key order), and each
    piece's (key, (rows, source bytes)), which size the placement without unpickling its rows again."""

    pieces: list[tuple[tuple[str, int, int], SealedBatch]]
    stats: list[tuple[tuple[str, int, int], tuple[int, int]]]


def keyed_record_rows(source: CompactionSource, shard_indexes: list[int], files_dir: str,
                      label_bits: dict[tuple[str, str], int]) -> KeyedRows:
    """The rows of the source shards `shard_indexes` (`record_rows`), by rank group: a writer process's job in
    a local run (`read_in_writer_process`), the launcher's elsewhere. RowListError as record_rows raises it."""
    rows = (row for index in shard_indexes for batch in record_rows(source, index, files_dir) for row in batch)
    groups = rank_groups(rows, source.placement.seed, label_bits)
    return KeyedRows([(key, SealedBatch.of(batch)) for key, batch in groups],
                     [(key, (len(batch), sum(max(row.size, 0) for row in batch))) for key, batch in groups])


def read_in_writer_process(source: CompactionSource, shard_indexes: list[int], files_dir: str,
                           label_bits: dict[tuple[str, str], int]) -> KeyedRows | Refused:
    """keyed_record_rows as a writer process's job: a RowListError comes back as a value (the pool reports any
    other failure with its traceback)."""
    try:
        return keyed_record_rows(source, shard_indexes, files_dir, label_bits)
    except RowListError as e:
        return Refused(RowListError, str(e))


def _describe_read(source: CompactionSource, shard_indexes: list[int], files_dir: str, label_bits) -> str:
    names = [source.shards[index].entry.file for index in shard_indexes]
    return f"the row lists of {len(names)} shards of version {source.version} ({', '.join(names[:3])}...)"


read_in_writer_process.describe_job = _describe_read  # for the pool's messages (shard_worker._Described)


def row_list_path(source: CompactionSource, shard_index: int) -> str:
    """Where a source shard's row list is: `rows/` of the folder of the build that holds the shard."""
    shard = source.shards[shard_index]
    return join(shard.folder, row_list_name(shard.entry.file))


def _row_list(source: CompactionSource, shard_index: int) -> list[ListedRow]:
    """A source shard's row list; a lost one rebuilt from the shard's records where they hold it
    (shardsmith/versions/row_check.py), else RowListError saying what to do."""
    shard, path = source.shards[shard_index], row_list_path(source, shard_index)
    data = storage.read_bytes(path)
    if data is not None:
        return parse_row_list(data, path)
    if source.why_not_rebuilt:
        raise row_check.missing(path, source.why_not_rebuilt)
    _LOG.warning("%s is missing: rebuilt from its shard's records", path)
    return row_check.rebuilt_rows(shard.path, source.metadata.compression_or_default, source.file_format,
                                 shard.split, path)


def _required(path: str, what: str) -> bytes:
    data = storage.read_bytes(path)
    if data is None:
        raise RowListError(f"{path} is missing: the version's shard has no {what} to compact it from")
    return data
