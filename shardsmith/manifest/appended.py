"""An appended manifest: the common nightly export, yesterday's file with today's rows added at its end.

Every build that reads one CSV or JSON Lines manifest records what it read (`ManifestRead.digest`: the bytes up
to its last line end, their SHA-256, the lines and the data rows they hold) in its version's metadata.json. An
--incremental night whose manifest starts with exactly those bytes (`prefix_matches`, checked by hashing them
before any row is parsed) knows, without parsing them, that those lines are the version's rows: each one is a
record of the version or a line of its errors.jsonl. It parses only the lines after them and the lines that
failed (`AppendedPlan.selection`), so a night costs what it adds, plus one hash of the manifest's bytes.

Guarantees: the selection is used only when the bytes match and the version's counts agree with its errors
(`AppendedPlan.consistent`); the rows parsed are the rows the full pairing would call new, the same rows by
content (a failed row of an identity that several lines share may be a different one of those lines: they are
the same row but for the line number). The bytes a night parses are hashed again as they are read, and a prefix
that differs from the one checked first (the file was rewritten in between) fails the build. Memory: one int per
error line of the version.
"""

from __future__ import annotations

import codecs
import hashlib
from dataclasses import dataclass, field
from typing import BinaryIO

from shardsmith import storage
from shardsmith.format.metadata import stream_errors
from shardsmith.format.metadata_schema import SHA256_HEX, ManifestDigestEntry

# Bytes hashed at a time when checking a manifest's prefix.
PREFIX_READ_CHUNK_BYTES = 1 << 20
# The manifest formats whose rows are lines, in the order the file holds them.
LINE_FORMATS = ("csv", "jsonl")


class ManifestChanged(Exception):
    """The manifest's first bytes differ from those checked before its rows were parsed."""


@dataclass(frozen=True)
class LineSelection:
    """The lines of an appended manifest that are parsed: every line after `after`, and the lines in `also`
    (the version's failed ones); `uncounted`: a skipped line that holds no data row (a CSV's header)."""

    after: int
    also: frozenset[int] = frozenset()
    uncounted: int = 0

    def parses(self, line: int) -> bool:
        return line > self.after or line in self.also


@dataclass
class ManifestRead:
    """What one read of a manifest file saw, kept as it reads (`reader` wraps the opened file): its bytes'
    SHA-256 and count, its last line's number, whether it ends with a line end, and the data rows it skipped.
    With `selection`, lines the selection does not parse are skipped (counted, not decoded); `expected` is the
    SHA-256 its first `expected_bytes` must have (ManifestChanged otherwise)."""

    selection: LineSelection | None = None
    expected: str = ""
    expected_bytes: int = 0
    num_bytes: int = 0
    lines: int = 0
    skipped: int = 0
    ends_with_line_end: bool = False
    _hash: object = field(default_factory=hashlib.sha256, repr=False)

    def reader(self, raw: BinaryIO) -> _HashingReader:
        return _HashingReader(raw, self)

    def take(self, data: bytes) -> None:
        if self.expected and self.num_bytes < self.expected_bytes <= self.num_bytes + len(data):
            cut = self.expected_bytes - self.num_bytes
            self._hash.update(data[:cut])
            if self._hash.hexdigest() != self.expected:
                raise ManifestChanged
            self._hash.update(data[cut:])
        else:
            self._hash.update(data)
        self.num_bytes += len(data)
        if data:
            self.ends_with_line_end = data.endswith(b"\n")

    def finish(self) -> None:
        """ManifestChanged when the file ended before the bytes that were checked."""
        if self.expected and self.num_bytes < self.expected_bytes:
            raise ManifestChanged

    def digest(self, rows: int) -> ManifestDigestEntry | None:
        """The record of what was read (`rows`: the data rows it held), or None for a file that does not end
        with a line end (rows appended to it would extend its last line)."""
        if not self.ends_with_line_end:
            return None
        return ManifestDigestEntry(bytes=self.num_bytes, sha256=self._hash.hexdigest(), lines=self.lines, rows=rows)


class _HashingReader:
    """A binary file whose bytes, as they are read, go to a ManifestRead."""

    def __init__(self, raw: BinaryIO, read: ManifestRead):
        self._raw = raw
        self._read = read

    def read(self, size: int = -1) -> bytes:
        data = self._raw.read(size)
        self._read.take(data)
        return data

    def __enter__(self) -> _HashingReader:
        return self

    def __exit__(self, *exc) -> None:
        self._raw.close()


def prefix_matches(path: str, digest: ManifestDigestEntry) -> bool:
    """Whether the file at `path` starts with the bytes `digest` records (their count and SHA-256) and those bytes
    hold the lines it records (\n, \r\n and \r each end one): a digest whose line count was edited is never
    trusted, so the lines after it are never taken for the appended ones."""
    hasher, left = hashlib.sha256(), digest.bytes
    line_ends, previous = 0, b""
    with storage.open_read(path) as raw:
        while left > 0:
            chunk = raw.read(min(left, PREFIX_READ_CHUNK_BYTES))
            if not chunk:
                return False
            hasher.update(chunk)
            joined = previous + chunk  # a \r\n across two chunks is one line end
            line_ends += chunk.count(b"\n") + chunk.count(b"\r") - joined.count(b"\r\n")
            previous = chunk[-1:]
            left -= len(chunk)
    return hasher.hexdigest() == digest.sha256 and line_ends == digest.lines


def valid_digest(digest: object) -> bool:
    """Whether a digest read from metadata.json (hostile input) holds what it must: counts and a SHA-256."""
    return (isinstance(digest, ManifestDigestEntry) and all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in (digest.bytes, digest.lines, digest.rows))
        and digest.bytes > 0 and isinstance(digest.sha256, str) and SHA256_HEX.fullmatch(digest.sha256) is not None)


@dataclass(frozen=True)
class AppendedPlan:
    """What a night needs to read an appended manifest: the published version's manifest digest, its record
    lines (`num_rows`) and the folder of its errors.jsonl."""

    digest: ManifestDigestEntry
    num_rows: int
    errors_path: str

    def failed_lines(self) -> frozenset[int] | None:
        """The manifest lines the version's errors.jsonl lists (none for a missing file: `selection` then finds
        the rows do not add up if any failed), or None when a line names no line number, or one twice (then the
        night parses every line)."""
        lines: set[int] = set()
        for fields in stream_errors(self.errors_path):
            line = fields.get("line") if fields is not None else None
            if not isinstance(line, int) or isinstance(line, bool) or line < 1 or line in lines:
                return None
            lines.add(line)
        return frozenset(lines)

    def selection(self, path: str) -> LineSelection | None:
        """The lines to parse of the manifest at `path`, or None when it must be read whole: it does not start
        with the version's bytes, or the version's errors do not account for its rows (its lines that failed
        and its records' lines must be all of the prefix's rows)."""
        failed = self.failed_lines()
        if failed is None or not all(line <= self.digest.lines for line in failed):
            return None
        if self.digest.rows != self.num_rows + len(failed):
            return None
        if not prefix_matches(path, self.digest):
            return None
        return LineSelection(self.digest.lines, failed)


def skipped_line_counts(number: int, line: bytes) -> bool:
    """Whether a skipped line holds a data row: any line but a blank one (as text: Unicode spaces are blank; the
    first line's byte order mark is not text)."""
    if number == 1 and line.startswith(codecs.BOM_UTF8):
        line = line[len(codecs.BOM_UTF8):]
    if line.strip():
        return line.isascii() or bool(line.decode("utf-8", "replace").strip())
    return False
