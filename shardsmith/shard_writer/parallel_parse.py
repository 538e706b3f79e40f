"""A large line manifest (CSV, JSON Lines) parsed by the build's writer processes while the launcher goes on: on
the local runner every stage on rows runs on the launcher's one core, and no shard can start before the last row
is placed, so the other cores would wait through the read.

The launcher reads the lines (`manifest_lines`: bounded memory, over-long lines never held) and parses the first
IN_PROCESS_LINES itself: a small build starts no process for them, and a CSV's first well-formed line says whether
it has a header before any line is parsed elsewhere. The rest go in chunks of CHUNK_LINES to the writer processes
(shardsmith/shard_writer/shard_worker.py's pool of the build, which then writes its shards): each parses its chunk with
the reader's own line parser and, with `look_up_sizes`, looks up the size of each row's local image file (one
stat), which the LookupSizes stage then does not repeat (it still judges empty and oversized files, and looks up
what was not found). A chunk's rows come back as one pickle (RowBatch).

Guarantees: the rows and error rows of `ManifestParser.parse`, in file order, each row only with its size set
where its file was found; chunks are parsed again from scratch by a new process if their process dies (no state
is kept), at most CHUNKS_IN_FLIGHT_PER_PROCESS per process are in hand, each job has the pool's deadline.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass

from shardsmith.manifest import LineParser, ManifestRead, manifest_lines, parse_numbered
from shardsmith.rows import ErrorRow, ManifestRow, RowBatch
from shardsmith.storage import is_remote, look_up

# Lines parsed in the launcher before any goes to another process: a manifest no longer than this (a build the
# writer processes do not start for, transforms/write_shards.py's SMALL_BUILD_IMAGES) is parsed as before.
IN_PROCESS_LINES = 256
# Lines a writer process parses per job: enough that a job's exchange (two pickles through pipes) is a small part
# of its lines' cost (tests/benchmarks/parse_costs.py).
CHUNK_LINES = 1024
# Writer processes started to parse (WriteShards starts the rest, if the build has shards for them): a process
# parses a row and looks up its file in about 6.4 us, which takes the launcher under 1 us to hand over
# (tests/benchmarks/parse_costs.py); with its other work on the row in the same stage, a few us, two keep up.
PARSING_PROCESSES = 2
# Chunks sent ahead per writer process.
CHUNKS_IN_FLIGHT_PER_PROCESS = 2
# Chunks the launcher parses itself while the writer processes hold as many as they are sent, before it waits for
# the oldest. With the above, bounds the rows held.
CHUNKS_PARSED_HERE_AHEAD = 4


@dataclass(frozen=True)
class RowHelpers:
    """Which build's writer processes take the launcher's work on rows (shard_worker.build_pool's key: the build's
    folder): parsing here, dealing rank groups in placement (transforms/place.py), reading a compaction's row
    lists; how many there are, and whether they look up image sizes as they parse (not for a night's rows, most
    of which are already published, nor for detection's box lines, which become an image's row only once
    grouped)."""

    build_folder: str
    processes: int
    look_up_sizes: bool


def parse_in_helpers(parser: LineParser, helpers: RowHelpers, read: ManifestRead | None = None
                     ) -> Iterator[ManifestRow | ErrorRow]:
    """The rows and error rows of the parser's source, in file order (see the module's guarantees). With `read`
    (one without a selection), every byte read goes to it, as `ManifestParser.parse` would give them."""
    from shardsmith.shard_writer.shard_worker import build_pool

    numbered = manifest_lines(parser.maker.source.path, read)
    first = list(itertools.islice(numbered, IN_PROCESS_LINES))
    yield from _in_file_order(*parse_chunk(parser, first, helpers.look_up_sizes))
    if len(first) < IN_PROCESS_LINES:
        return
    while not parser.settled:  # a CSV whose first lines are blank or malformed: its layout is still to come
        line = next(numbered, None)
        if line is None:
            return
        yield from _in_file_order(*parse_chunk(parser, [line], helpers.look_up_sizes))
    pool = build_pool(helpers.build_folder, min(helpers.processes, PARSING_PROCESSES))
    # An empty chunk per process: once one is answered, a process has started and imported the parser's modules;
    # until then the launcher parses every chunk itself rather than wait.
    started = [pool.submit(parse_chunk, parser, [], False) for _ in range(pool.processes)]
    sent = pool.processes * CHUNKS_IN_FLIGHT_PER_PROCESS
    parsed: deque[_Chunk] = deque()  # in file order
    for lines in _chunks(numbered, CHUNK_LINES):
        chunk = _Chunk(lines)
        if sum(isinstance(c.taken, Future) for c in parsed) < sent and any(s.done() for s in started):
            chunk.taken = pool.submit(parse_chunk, parser, lines, helpers.look_up_sizes)
        else:  # rather than wait for the writer processes (starting, or busy), parse it here
            chunk.take_here(parser, helpers.look_up_sizes)
        parsed.append(chunk)
        while parsed and (parsed[0].done() or len(parsed) >= sent + CHUNKS_PARSED_HERE_AHEAD):
            yield from _in_file_order(*parsed.popleft().result(parsed, parser, helpers.look_up_sizes))
    while parsed:
        yield from _in_file_order(*parsed.popleft().result(parsed, parser, helpers.look_up_sizes))


class _Chunk:
    """Some lines and where they are parsed: `taken` is the writer process's job (a Future), or the result
    when they were parsed here (None: not yet)."""

    def __init__(self, lines: list[tuple[int, str | None]]):
        self.lines = lines
        self.taken: Future | tuple[RowBatch, list[ErrorRow]] | None = None

    def take_here(self, parser: LineParser, look_up_sizes: bool) -> None:
        self.taken = parse_chunk(parser, self.lines, look_up_sizes)
        self.lines = []

    def done(self) -> bool:
        return not isinstance(self.taken, Future) or self.taken.done()

    def result(self, later: deque[_Chunk], parser: LineParser, look_up_sizes: bool
               ) -> tuple[RowBatch, list[ErrorRow]]:
        """The rows and error rows; while this chunk's job is unanswered, the launcher parses the `later` chunks
        no writer process has started (the newest first), instead of waiting."""
        for chunk in reversed(later):
            if self.done():
                break
            if isinstance(chunk.taken, Future) and chunk.taken.cancel():
                chunk.take_here(parser, look_up_sizes)
        return self.taken.result() if isinstance(self.taken, Future) else self.taken


def parse_chunk(parser: LineParser, numbered: list[tuple[int, str | None]], look_up_sizes: bool
                ) -> tuple[RowBatch, list[ErrorRow]]:
    """A writer process's job: the rows and the error rows of some lines (each in file order), each row with
    its size set where `look_up_sizes` and its local file was found."""
    rows, errors = RowBatch(), []
    for item in parse_numbered(parser.maker, parser, numbered):
        if not isinstance(item, ManifestRow):
            errors.append(item)
            continue
        if look_up_sizes and not is_remote(item.resolved_uri):
            size = look_up(item.resolved_uri).size
            if size is not None:
                item = item.replaced(size=size)
        rows.append(item)
    return rows, errors


def _describe_chunk(parser: LineParser, numbered: list[tuple[int, str | None]], look_up_sizes: bool) -> str:
    if not numbered:
        return f"the start of the parse of manifest {parser.maker.source.path}"
    return f"lines {numbered[0][0]}-{numbered[-1][0]} of manifest {parser.maker.source.path}"


parse_chunk.describe_job = _describe_chunk  # for the pool's messages (shard_worker._Described)


def _chunks(numbered: Iterator[tuple[int, str | None]], size: int) -> Iterator[list[tuple[int, str | None]]]:
    while chunk := list(itertools.islice(numbered, size)):
        yield chunk


def _in_file_order(rows: Iterable[ManifestRow], errors: list[ErrorRow]) -> Iterator[ManifestRow | ErrorRow]:
    """A chunk's rows and error rows merged by line, as one parse of its lines gives them."""
    pending = iter(errors)
    error = next(pending, None)
    for row in rows:
        while error is not None and error.line < row.line:
            yield error
            error = next(pending, None)
        yield row
    if error is not None:
        yield error
        yield from pending
