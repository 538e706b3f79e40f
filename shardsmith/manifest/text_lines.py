"""The lines of a text manifest (CSV, JSON Lines), read in bounded memory, and each made a row or an error row.

No line can stop a read: one that cannot be parsed, for whatever reason, or that is longer than
MAX_MANIFEST_LINE_BYTES is an ErrorRow. Reading streams the file and holds at most one line of it (up to that
bound) in memory. Blank lines are not data rows.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Iterable, Iterator
from typing import BinaryIO

from shardsmith.manifest.appended import ManifestRead, lines_of
from shardsmith.manifest.row_maker import RowMaker
from shardsmith.manifest.source import open_manifest
from shardsmith.rows import ErrorRow, ManifestRow

# A longer manifest line is an error row, skipped without being held in memory: no real row comes near it.
MAX_MANIFEST_LINE_BYTES = 1 << 20
# Bytes read from a manifest at a time; memory per manifest read is at most this plus MAX_MANIFEST_LINE_BYTES.
MANIFEST_READ_CHUNK_BYTES = 64 << 10


def manifest_lines(path: str, read: ManifestRead | None = None) -> Iterator[tuple[int, str | None]]:
    """(line number, text without its line end) for each line of a manifest, or (line number, None) for a line
    longer than MAX_MANIFEST_LINE_BYTES, which is skipped to its end unread. A UTF-8 BOM at the start is dropped;
    undecodable bytes become U+FFFD, so that one bad line is one error row, not a dead job. With `read`, every
    byte read goes to it, and only the lines its selection parses come out (appended.py)."""
    with open_manifest(path) as raw:
        numbered = enumerate(bounded_lines(raw if read is None else read.reader(raw), MAX_MANIFEST_LINE_BYTES),
                             start=1)
        for number, line in numbered if read is None else lines_of(read, numbered):
            if line is None:
                yield number, None
                continue
            if number == 1 and line.startswith(codecs.BOM_UTF8):
                line = line[len(codecs.BOM_UTF8):]
            yield number, line.decode("utf-8", "replace")
        if read is not None:
            read.finish()


def bounded_lines(raw: BinaryIO, limit: int, chunk_bytes: int = MANIFEST_READ_CHUNK_BYTES) -> Iterator[bytes | None]:
    """Each line of `raw` without its line end (\\n, \\r\\n or \\r, as text mode splits lines), or None for a line
    of more than `limit` bytes. Never holds more than `limit` + `chunk_bytes` bytes of one line."""
    pending = b""  # the start of a line whose end is not read yet
    skipping = False  # that line is over the limit: its bytes are dropped as they come
    while chunk := raw.read(chunk_bytes):
        data = pending + chunk
        # The last line end read, but not a final \r: it may be the first half of a \r\n.
        cut = max(data.rfind(b"\n"), data.rfind(b"\r", 0, len(data) - 1)) + 1
        pending = data[cut:]
        for line in data[:cut].splitlines():
            yield None if skipping or len(line) > limit else line
            skipping = False
        if skipping or len(pending) - pending.endswith(b"\r") > limit:
            pending, skipping = pending[-1:] if pending.endswith(b"\r") else b"", True
    if pending or skipping:
        line = pending[:-1] if pending.endswith(b"\r") else pending
        yield None if skipping or len(line) > limit else line


def parsed_lines(maker: RowMaker, parse_line: Callable[[int, str], ManifestRow | ErrorRow | None],
                 read: ManifestRead | None = None) -> Iterator:
    """`parse_line(line, text)` over each non-blank line of the maker's source (with `read`, of those its
    selection parses), its exceptions and over-long lines made error rows of their line: whatever a line holds,
    the rest of the manifest is read."""
    return parse_numbered(maker, parse_line, manifest_lines(maker.source.path, read))


def parse_numbered(maker: RowMaker, parse_line: Callable[[int, str], ManifestRow | ErrorRow | None],
                   numbered: Iterable[tuple[int, str | None]]) -> Iterator:
    """`parsed_lines` over lines already read: (line number, text) pairs as `manifest_lines` gives them."""
    for line, text in numbered:
        if text is None:
            yield maker.line_error(line, f"line is longer than {MAX_MANIFEST_LINE_BYTES >> 20} MiB",
                                   f"at most {MAX_MANIFEST_LINE_BYTES} bytes per line")
            continue
        if not text.strip():
            continue
        try:
            item = parse_line(line, text)
        except Exception as e:  # e.g. RecursionError from JSON nested 100,000 deep
            item = maker.line_error(line, "line could not be parsed", f"{type(e).__name__}: {e}"[:300])
        if item is not None:
            yield item
