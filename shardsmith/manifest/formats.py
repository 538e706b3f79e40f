"""The one interface every manifest format's reader keeps, and the choice of reader by a source's name.

A reader (one module per format: csv_file, jsonl_file, parquet_file, class_folders) gives
- `rows(source, fmt)`: every data row of the source exactly once, in file order: a ManifestRow, or an ErrorRow
  (stage "manifest") naming its line or row number and what is wrong with it; nothing a row holds stops the read;
- `input_problem(path, fmt)`: one sentence for a mistake the input shows before a build reads it (a binary file,
  column names without --uri_column or --label_column, swapped columns, a folder without class folders), or None;
- `sample_columns(path, limit)`: the first `limit` rows as {column name as written: value}, for `shardsmith
  schema`.
A line format's reader (appended.LINE_FORMATS: CSV, JSON Lines) keeps `LineFormatReader` too: `rows(source, fmt,
read)` parses only the lines an appended night's ManifestRead selects, and `line_parser(source, fmt)` is the
LineParser its `rows` applies to each line, so that a build's writer processes can parse a large manifest's lines
(shardsmith/shard_writer/parallel_parse.py).
A new format is a new module with such a class, named in READERS (docs/extending.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from shardsmith.manifest.appended import LINE_FORMATS, ManifestRead
from shardsmith.manifest.class_folders import ClassFolders
from shardsmith.manifest.csv_file import CsvManifest
from shardsmith.manifest.jsonl_file import JsonlManifest
from shardsmith.manifest.parquet_file import ParquetManifest
from shardsmith.manifest.row_maker import RowMaker
from shardsmith.manifest.settings import ManifestFormat
from shardsmith.manifest.source import Source
from shardsmith.rows import ErrorRow, ManifestRow


class ManifestReader(Protocol):
    """What every format's reader gives (see the module's docstring for the guarantee each method keeps)."""

    kind: str  # Source.kind
    extensions: tuple[str, ...]  # lower-case file name endings this reader takes

    def rows(self, source: Source, fmt: ManifestFormat) -> Iterator[ManifestRow | ErrorRow]: ...

    def input_problem(self, path: str, fmt: ManifestFormat) -> str | None: ...

    def sample_columns(self, path: str, limit: int) -> Iterator[dict[str, object]]: ...


class LineFormatReader(ManifestReader, Protocol):
    """What a line format's reader (appended.LINE_FORMATS: CSV, JSON Lines) gives besides: `rows` that, given a
    ManifestRead, passes it the bytes read and parses only the lines its selection keeps (an appended night's
    new and failed lines), and the LineParser its `rows` applies to each line."""

    def rows(self, source: Source, fmt: ManifestFormat, read: ManifestRead | None = None
             ) -> Iterator[ManifestRow | ErrorRow]: ...

    def line_parser(self, source: Source, fmt: ManifestFormat) -> LineParser: ...


class LineParser(Protocol):
    """One line's row, error row or None (a line that is no data row: a CSV header), as a line format's `rows`
    parses it; picklable. `settled`: the parser keeps no state from one line to the next any more (a CSV's, once
    its first well-formed line said whether it has a header), so that lines after it may be parsed anywhere."""

    maker: RowMaker
    settled: bool

    def __call__(self, line: int, text: str) -> ManifestRow | ErrorRow | None: ...


FOLDER = ClassFolders()
DEFAULT = CsvManifest()  # a manifest file whose name ends in no reader's extension
READERS: dict[str, ManifestReader] = {r.kind: r for r in (DEFAULT, JsonlManifest(), ParquetManifest(), FOLDER)}


def line_reader(kind: str) -> LineFormatReader:
    """The reader of a line format (appended.LINE_FORMATS); ValueError for another kind."""
    reader = READERS[kind]
    if kind not in LINE_FORMATS or not hasattr(reader, "line_parser"):
        raise ValueError(f"a {kind} manifest is not read line by line")
    return reader  # type: ignore[return-value]


def source_kind(path: str, is_folder: bool) -> str:
    """The kind of reader for an input: "folder" for a folder, else by the file name's extension (any case),
    "csv" when no reader claims it."""
    if is_folder:
        return FOLDER.kind
    name = path.lower()
    return next((r.kind for r in READERS.values() if r.extensions and name.endswith(r.extensions)), DEFAULT.kind)


class ManifestParser:
    """Reads Sources with one ManifestFormat: `parse(source)` yields its ManifestRows and ErrorRows in file
    order, from the reader of its kind."""

    def __init__(self, fmt: ManifestFormat):
        self._fmt = fmt

    def parse(self, source: Source, read: ManifestRead | None = None) -> Iterator[ManifestRow | ErrorRow]:
        """With `read` (a line format's source only: appended.LINE_FORMATS), the bytes read go to it and only
        the lines its selection parses are parsed."""
        if read is None:
            return READERS[source.kind].rows(source, self._fmt)
        return line_reader(source.kind).rows(source, self._fmt, read)

    def line_parser(self, source: Source) -> LineParser:
        """The line parser of a line format's source (appended.LINE_FORMATS)."""
        return line_reader(source.kind).line_parser(source, self._fmt)


def input_problem(source: Source, fmt: ManifestFormat) -> str | None:
    """What the input shows is wrong before a build reads it (its reader's check), or None."""
    return READERS[source.kind].input_problem(source.path, fmt)


def sample_columns(path: str, limit: int) -> Iterator[dict[str, object]]:
    """The first `limit` data rows of a manifest file as {column name as written: value}. Raises ValueError for
    a CSV with no header."""
    return READERS[source_kind(path, False)].sample_columns(path, limit)
