"""`shardsmith.records(out, split)`: a split's records as a Python sequence, without TensorFlow.

`len(records)`, `records[i]` (random access through each shard's index file) and iteration (each shard
streamed in order) give each record as a dict of plain values: every key of metadata.json's `features`, scalars
as `bytes`, `int` or `float`, lists as numpy arrays (`bytes_list`: a list of bytes). Record `i` is record `i` of
the split in shard order, the order `shardsmith verify` reads.

Guarantees: every record handed out had both its CRCs checked as it was read (a damaged record raises
CorruptRecord, naming the shard, the record and the byte); the build is the one metadata.json named when
`records()` was called (or the kept version `version` names: a build id or a tag), and its shard files are
those metadata.json lists, never globbed. A shard without an index file (gzip shards; builds made before index
files, unless `shardsmith index` wrote them) is read once whole to find its records, the first time one of them
is asked for.

Files: local paths use plain file calls (`os.pread`, so worker processes and threads share nothing); gs:// goes
through Beam's FileSystems, imported only then, a shard streamed with its next 16 MB fetched ahead, a record read
at random with one ranged request for its bytes. All of it is in `open_stored` and `_RangeReader`. Memory: one
record at a time, one index per shard touched (16 bytes a record), and at most MAX_OPEN_FILES open files.
"""

from __future__ import annotations

import bisect
import operator
import os
import sys
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from shardsmith import storage
from shardsmith.format.naming import index_file_name, is_remote
from shardsmith.format.record_file import FramingError, RecordFileFormat, record_file
from shardsmith.format.record_index import RecordIndex
from shardsmith.output_folder import dataset_dir, open_version
from shardsmith.read.record_stream import decompressed
from shardsmith.read.version_files import split_name, split_shards

MAX_OPEN_FILES = 64  # shard files a reader keeps open for random access (least recently used closed first)


class CorruptRecord(RuntimeError):
    """A record failed its checksums or a shard is not what metadata.json says; the message, one line, says where."""


@dataclass(frozen=True)
class Shard:
    """One shard file of the split: where it is, how many records it holds and the index of its first one."""

    path: str
    num_records: int
    start: int  # split-wide index of its first record
    index_path: str | None  # its index file: listed in metadata.json, or beside it by name; None: none can be
    num_bytes: int | None = None  # the file's size as metadata.json records it (None in metadata without it)
    first_key: str | None = None  # its first record's image/key/sha256 as metadata.json records it


def open_stored(path: str):
    """A shard file's bytes as stored, for reading (local or gs://, through the storage module). A remote shard
    read front to back has its next chunk fetched while the records before it are handed out
    (`storage.ReadAhead`), so a reader decoding them does not wait out each request's latency."""
    return storage.open_read(path, buffered=True, read_ahead=True)


def scanned_index(path: str, compression: str, file_format: RecordFileFormat) -> RecordIndex:
    """The index of a shard, found by reading it whole (both CRCs of each record checked)."""
    index = RecordIndex()
    with decompressed(open_stored(path), compression) as stream:
        try:
            for data in file_format.iter_records(stream):
                index.add(len(data))
        except FramingError as e:
            raise CorruptRecord(f"{path}: {e.reason} at byte {e.offset} (record {len(index)})") from None
    return index


class _RangeReader:
    """Reads byte ranges of shard files: local ones through up to MAX_OPEN_FILES open descriptors, remote ones a
    ranged request each (`storage.read_range`), gzip ones by seeking their stream. Safe across threads; a copy in
    another process (a DataLoader worker, forked or pickled) opens its own files."""

    def __init__(self, compression: str):
        self._compression = compression
        self._files: OrderedDict[str, object] = OrderedDict()
        self._pid = os.getpid()
        self._lock = threading.Lock()

    def read(self, path: str, offset: int, length: int) -> bytes:
        if is_remote(path) and self._compression != "gzip":
            return storage.read_range(path, offset, length)  # one request for just these bytes
        local = not is_remote(path) and self._compression != "gzip"
        with self._lock:
            if self._pid != os.getpid():  # a forked copy: the parent's descriptors share file positions
                self._files, self._pid = OrderedDict(), os.getpid()
            handle = self._handle(path, local)
            if local:
                return os.pread(handle, length, offset)
            handle.seek(offset)  # a gzip stream seeks by decompressing (from the start, going backwards)
            return handle.read(length)

    def _handle(self, path: str, local: bool):
        if path in self._files:
            self._files.move_to_end(path)
            return self._files[path]
        if len(self._files) >= MAX_OPEN_FILES:
            _close(self._files.popitem(last=False)[1])
        handle = os.open(path, os.O_RDONLY) if local else decompressed(open_stored(path), self._compression)
        self._files[path] = handle
        return handle

    def __getstate__(self) -> dict:
        return {"_compression": self._compression}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["_compression"])

    def __del__(self, finalizing=sys.is_finalizing) -> None:  # bound now: it outlives the module's globals
        # At interpreter exit the module's globals (_close, os) may already be cleared, and the process's end
        # closes its descriptors: nothing is left to do.
        if not finalizing() and getattr(self, "_pid", None) == os.getpid():
            for handle in self._files.values():
                _close(handle)


def _close(handle) -> None:
    if isinstance(handle, int):
        os.close(handle)
    else:
        handle.close()


def record_values(data: bytes, features: dict[str, str]) -> dict:
    """A serialized record as {key: value} for every key of `features` (metadata.json's): bytes, int64 and
    float scalars as bytes, int and float (None if the record lacks it); lists as numpy arrays (int64,
    float32), bytes_list as a list of bytes (empty when the record leaves the key out)."""
    import numpy as np

    from shardsmith.format.example import parse_example

    values = parse_example(data)
    out = {}
    for key, kind in features.items():
        found = values.get(key, [])
        if not kind.endswith("_list"):
            out[key] = found[0] if found else None
        elif kind == "bytes_list":
            out[key] = list(found)
        else:
            out[key] = np.asarray(found, dtype=np.int64 if kind == "int64_list" else np.float32)
    return out


class Records(Sequence):
    """The records of one split of one build; see the module's docstring. Picklable (DataLoader workers)."""

    def __init__(self, output_dir: str, split: str = "train", version: str | None = None):
        self.output_dir = os.fspath(output_dir).rstrip("/")
        opened = open_version(self.output_dir, version)
        self.metadata, read_from = opened.metadata, opened.folder
        self.version_id: str | None = opened.build_id  # the version read, a tag resolved (None: the published)
        self.folder = dataset_dir(read_from, self.metadata)
        self.split = split_name(split, self.metadata)
        self.compression = self.metadata.compression_or_default
        self.file_format = record_file(self.metadata.format)
        self.features: dict[str, str] = dict(self.metadata.features)
        self.labels: list[str] = list(self.metadata.labels)
        self.shards: list[Shard] = []
        start = 0
        for shard in split_shards(read_from, self.metadata, self.split):
            entry = shard.entry
            index_path = None
            if self.compression != "gzip" and self.file_format.indexable:
                index_path = index_file_name(shard.path)
            self.shards.append(Shard(shard.path, entry.num_examples, start, index_path, entry.num_bytes,
                                     entry.first_key if entry.num_examples else None))
            start += entry.num_examples
        self._starts = [s.start for s in self.shards]
        self._length = start
        self._indexes: dict[int, RecordIndex] = {}
        self._first_keys_checked: set[int] = set()
        self._reader = _RangeReader(self.compression)

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._length))]
        return record_values(self.read(i), self.features)

    def __iter__(self) -> Iterator[dict]:
        return self.iter_range(0, self._length)

    def locate(self, i: int) -> tuple[int, int]:
        """(shard number, record number in that shard) of split-wide record `i` (negative counts from the end).
        `i` is an int or a numpy integer: a bool (a mask's element, not a position), a float or a string is a
        TypeError, never taken as 0 or 1, truncated or parsed."""
        try:
            if isinstance(i, bool) or type(i).__name__ in ("bool", "bool_"):
                raise TypeError
            given = operator.index(i)
        except TypeError:
            raise TypeError(f"record indices must be integers or slices, not {type(i).__name__}") from None
        i = given + self._length if given < 0 else given
        if not 0 <= i < self._length:
            raise IndexError(f"record {given} is out of range for a split of {self._length} records")
        shard = bisect.bisect_right(self._starts, i) - 1
        while self.shards[shard].num_records == 0 or i >= self.shards[shard].start + self.shards[shard].num_records:
            shard += 1
        return shard, i - self.shards[shard].start

    def read(self, i: int) -> bytes:
        """Record `i`'s serialized Example, both CRCs checked."""
        shard, at = self.locate(i)
        self.check_first_key(shard)
        return self._read_at(shard, at)

    def _read_at(self, shard: int, at: int) -> bytes:
        index = self.shard_index(shard)
        offset, length = index.offsets[at], index.lengths[at]
        path = self.shards[shard].path
        try:
            return self.file_format.unframe(self._reader.read(path, offset, length), offset)
        except FramingError as e:
            raise CorruptRecord(f"{path} record {at}: {e.reason} at byte {e.offset}"
                                + (f" ({e.detail})" if e.detail else "")) from None

    def check_first_key(self, shard: int) -> None:
        """The first time a shard is read, its first record must carry the image/key/sha256 metadata.json records
        for it, as `load()` checks: a shard (and its index file) swapped in from another build of the same size
        and count raises CorruptRecord naming it, before any of its records is handed out. Costs one record read
        per shard, once per reader (and per DataLoader worker)."""
        if shard in self._first_keys_checked:
            return
        info = self.shards[shard]
        if info.first_key is not None:
            from google.protobuf.message import DecodeError

            from shardsmith.format.example import SHA256, feature_values
            from shardsmith.read.version_files import first_key_problem

            first = self._read_at(shard, 0) if info.index_path else next(self._stream(shard, 0, 1), None)
            key = None
            try:
                keys = feature_values(first, (SHA256,)).get(SHA256) if first is not None else None
                key = keys[0].decode("utf-8", "replace") if keys else None
            except DecodeError:
                pass
            problem = first_key_problem(info.path, key, info.first_key)
            if problem:
                raise CorruptRecord(problem)
        self._first_keys_checked.add(shard)

    def shard_index(self, shard: int) -> RecordIndex:
        """Shard `shard`'s record index: its index file, or (without one) found by reading the shard once."""
        if shard not in self._indexes:
            info = self.shards[shard]
            data = storage.read_bytes(info.index_path) if info.index_path else None
            index = (RecordIndex.parse(data, info.index_path) if data is not None
                     else scanned_index(info.path, self.compression, self.file_format))
            if len(index) != info.num_records:
                raise CorruptRecord(f"{info.index_path if data is not None else info.path} holds {len(index)} "
                                    f"records, metadata.json says {info.num_records}: not this build's file")
            # An index file is input: its records must end where the shard does, or a record's offset and length
            # would ask for bytes (and a buffer of that size) the shard does not have.
            if data is not None and info.num_bytes is not None and index.end != info.num_bytes:
                raise CorruptRecord(f"{info.index_path} covers {index.end} bytes, metadata.json says the shard holds "
                                    f"{info.num_bytes}: not this build's index")
            self._indexes[shard] = index
        return self._indexes[shard]

    def iter_range(self, start: int, stop: int, shard_order: Sequence[int] | None = None) -> Iterator[dict]:
        """Records `start` to `stop` (exclusive) of the split, or of the shards taken in `shard_order` one
        after the other, streamed shard by shard (each shard opened once, read in file order)."""
        for shard, first, last in self.pieces(start, stop, shard_order):
            for data in self.shard_records(shard, first, last):
                yield record_values(data, self.features)

    def pieces(self, start: int, stop: int, shard_order: Sequence[int] | None = None) -> list[tuple[int, int, int]]:
        """(shard, first, last) record ranges that make up positions `start`..`stop` of the shards taken in
        `shard_order` (default: file order), each shard's records counted in file order."""
        pieces, position = [], 0
        for shard in shard_order if shard_order is not None else range(len(self.shards)):
            count = self.shards[shard].num_records
            first, last = max(start - position, 0), min(stop - position, count)
            if first < last:
                pieces.append((shard, first, last))
            position += count
        return pieces

    def shard_records(self, shard: int, first: int = 0, last: int | None = None) -> Iterator[bytes]:
        """Records `first`..`last` of one shard, streamed in file order, both CRCs of each checked; starting
        past the first record seeks through the shard's index."""
        info = self.shards[shard]
        last = info.num_records if last is None else last
        if first >= last:
            return
        self.check_first_key(shard)
        yield from self._stream(shard, first, last)

    def _stream(self, shard: int, first: int, last: int) -> Iterator[bytes]:
        info = self.shards[shard]
        offset = self.shard_index(shard).offsets[first] if first else 0
        got = first
        with decompressed(open_stored(info.path), self.compression) as stream:
            if offset:
                stream.seek(offset)
            framed = self.file_format.iter_records(stream)
            while True:
                # The yield stays outside this try: a generator left open is closed at interpreter exit, when
                # FramingError may be a cleared global that an `except` around the yield would evaluate.
                try:
                    data = next(framed, None)
                except FramingError as e:
                    raise CorruptRecord(f"{info.path} record {got}: {e.reason} at byte {offset + e.offset}") from None
                if data is None:
                    break
                yield data
                got += 1
                if got == last:
                    return
        raise CorruptRecord(f"{info.path} ended after {got} records, metadata.json says {info.num_records}")


def records(output_dir: str, split: str = "train", version: str | None = None) -> Records:
    """The records of `split` (spelled as `build` accepts it) in the build `output_dir` publishes, or in its
    kept version `version` (a build id or a tag's name): a sequence of dicts, without TensorFlow (see
    shardsmith/read/record_sequence.py)."""
    return Records(output_dir, split, version)
