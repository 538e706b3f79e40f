"""The lines of a text manifest (CSV, JSON Lines), read in bounded memory, and each made a row or an error row.

No line can stop a read: one that cannot be parsed, for whatever reason, or that is longer than
MAX_MANIFEST_LINE_BYTES is an ErrorRow. Reading streams the file and holds at most one line of it (up to that
bound) in memory. Blank lines are not data rows.
"""

from __future__ import annotations

import bisect
import codecs
import re
from collections.abc import Callable, Iterable, Iterator
from typing import BinaryIO

from shardsmith.manifest.appended import LineSelection, ManifestRead, skipped_line_counts
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
    byte read goes to it, and only the lines its selection parses come out (`lines_of`)."""
    with open_manifest(path) as raw:
        if read is None:
            numbered = enumerate(bounded_lines(raw, MAX_MANIFEST_LINE_BYTES), start=1)
        else:
            numbered = lines_of(read, line_blocks(read.reader(raw), MAX_MANIFEST_LINE_BYTES), MAX_MANIFEST_LINE_BYTES)
        for number, line in numbered:
            if line is None:
                yield number, None
                continue
            if number == 1 and line.startswith(codecs.BOM_UTF8):
                line = line[len(codecs.BOM_UTF8):]
            yield number, line.decode("utf-8", "replace")
        if read is not None:
            read.finish()


def line_blocks(raw: BinaryIO, limit: int, chunk_bytes: int = MANIFEST_READ_CHUNK_BYTES) -> Iterator[bytes | None]:
    """`raw`'s bytes as blocks of whole lines, in order, line ends kept (\\n, \\r\\n or \\r end a line, as text
    mode ends them; the file's last line may have none), with None in place of a line of more than `limit` bytes
    that one read did not hold whole (a shorter read's block may still hold longer lines: `block_lines` makes
    them None). Never holds more than `limit` + `chunk_bytes` bytes of one line."""
    pending = b""  # the start of a line whose end is not read yet
    skipping = False  # that line is over the limit: its bytes are dropped as they come
    while chunk := raw.read(chunk_bytes):
        data = pending + chunk
        # The last line end read, but not a final \r: it may be the first half of a \r\n.
        cut = max(data.rfind(b"\n"), data.rfind(b"\r", 0, len(data) - 1)) + 1
        pending = data[cut:]
        if cut:
            block = data[:cut]
            if skipping:  # the block starts with the over-long line's end
                yield None
                block, skipping = block[_first_line_length(block):], False
            if block:
                yield block
        if skipping or len(pending) - pending.endswith(b"\r") > limit:
            pending, skipping = pending[-1:] if pending.endswith(b"\r") else b"", True
    if skipping:
        yield None
    elif pending:
        yield pending


def _first_line_length(block: bytes) -> int:
    """The length of a block's first line, its line end included."""
    end = min(i for i in (block.find(b"\n"), block.find(b"\r"), len(block) - 1) if i >= 0)
    return end + (2 if block[end:end + 2] == b"\r\n" else 1)


def block_lines(block: bytes | None, limit: int) -> list[bytes | None]:
    """A block's lines without their line ends (None for one of more than `limit` bytes)."""
    if block is None:
        return [None]
    return [None if len(line) > limit else line for line in block.splitlines()]


def bounded_lines(raw: BinaryIO, limit: int, chunk_bytes: int = MANIFEST_READ_CHUNK_BYTES) -> Iterator[bytes | None]:
    """Each line of `raw` without its line end (\\n, \\r\\n or \\r, as text mode splits lines), or None for a line
    of more than `limit` bytes. Never holds more than `limit` + `chunk_bytes` bytes of one line."""
    for block in line_blocks(raw, limit, chunk_bytes):
        yield from block_lines(block, limit)


# A line end followed by a line that does not start with printable, non-space ASCII (blank, indented, not ASCII).
_LINE_NOT_TEXT_START = re.compile(rb"\n[^\x21-\x7e]")


def _counted_whole(block: bytes | None, first: int, selection: LineSelection, also: list[int]) -> int:
    """How many lines `block` (whose first line is line `first`) holds, when the selection parses none of them
    and every one is a data row that starts with printable ASCII (what `skipped_line_counts` would find, line
    by line), so that they are counted without being split; else 0. Lines ending in a lone \\r, line 1 (its
    byte order mark) and the header line are left to the line-by-line test."""
    if block is None or first == 1 or not block.endswith(b"\n") or not 32 < block[0] < 127:
        return 0
    line_ends = block.count(b"\n")
    last = first + line_ends - 1
    if last > selection.after or first <= selection.uncounted <= last:
        return 0
    later = bisect.bisect_left(also, first)
    if later < len(also) and also[later] <= last:
        return 0
    if block.count(b"\r") != block.count(b"\r\n") or _LINE_NOT_TEXT_START.search(block):
        return 0
    return line_ends


def lines_of(read: ManifestRead, blocks: Iterator[bytes | None], limit: int) -> Iterator[tuple[int, bytes | None]]:
    """The numbered lines of `blocks` (`line_blocks`) that a read parses: all of them, or those its selection
    parses (the others counted in `read.skipped` when they hold a data row: `skipped_line_counts`).

    Cost: a block of skipped lines that all start with printable ASCII (nearly every block of a real manifest's
    verified prefix) is counted in C, without splitting it (`_counted_whole`): an appended night pays about 0.25
    us per carried row for checking and reading the prefix, both hashes included (tests/benchmarks/night_cost.py)."""
    selection, number, skipped = read.selection, read.lines, 0
    also = sorted(selection.also) if selection is not None else []
    try:
        for block in blocks:
            if selection is not None and (whole := _counted_whole(block, number + 1, selection, also)):
                number += whole
                skipped += whole
                continue
            for line in block_lines(block, limit):
                number += 1
                if selection is None or selection.parses(number):
                    read.lines, read.skipped = number, read.skipped + skipped
                    skipped = 0
                    yield number, line
                elif number == selection.uncounted:
                    continue
                elif line is None or skipped_line_counts(number, line):
                    skipped += 1
    finally:  # also when the reader stops early: the counts say what was read
        read.lines, read.skipped = number, read.skipped + skipped


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
