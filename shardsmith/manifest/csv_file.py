"""CSV manifests: AutoML Vision's `split,image_uri,label` (or `image_uri,label`) without a header, or any columns
under a header row that names --uri_column. Also the format of a manifest whose name ends in no other format's
extension.

Each physical line is parsed on its own: no manifest field may hold a line break, and this way a stray quote costs
one error line instead of swallowing the rest of the file into one field. Line numbers count every line of the
file, the header's included.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace

from shardsmith.format.naming import canonical_split
from shardsmith.manifest.annotations import AUTOML_BOX_FIELDS
from shardsmith.manifest.appended import LineSelection, ManifestRead
from shardsmith.manifest.header_checks import (
    COLUMN_ALIASES,
    SAMPLE_ROWS,
    binary_problem,
    missing_columns_problem,
    swapped_columns_problem,
)
from shardsmith.manifest.row_maker import RowMaker
from shardsmith.manifest.settings import ManifestFormat
from shardsmith.manifest.source import Source
from shardsmith.manifest.text_lines import manifest_lines, parsed_lines
from shardsmith.rows import ErrorRow, ManifestRow

_HEADER_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_ .-]*")


class CsvManifest:
    """The CSV reader (formats.py's ManifestReader)."""

    kind = "csv"
    extensions = (".csv",)

    def rows(self, source: Source, fmt: ManifestFormat, read: ManifestRead | None = None
             ) -> Iterator[ManifestRow | ErrorRow]:
        parser = self.line_parser(source, fmt)
        if read is not None and read.selection is not None:
            read.selection = _read_layout(parser.maker, parser.layout, read.selection)
        return parsed_lines(parser.maker, parser, read)

    def line_parser(self, source: Source, fmt: ManifestFormat) -> CsvLineParser:
        return CsvLineParser(RowMaker(fmt, source), _CsvLayout())

    def input_problem(self, path: str, fmt: ManifestFormat) -> str | None:
        """A binary file, a header without the needed columns, or columns that look swapped."""
        return binary_problem(path) or header_problem(path, fmt) or swapped_columns_problem(
            path, *_sample_rows(path, fmt), fmt)

    def sample_columns(self, path: str, limit: int) -> Iterator[dict[str, object]]:
        """The first `limit` rows under the header as {column name as written: text}; rows of another length
        are skipped. Raises ValueError for a file with no header."""
        header: list[str] | None = None
        count = 0
        for fields in _well_formed(path):
            if count >= limit:
                return
            if header is None:
                header = [name.strip() for name in fields]
            elif len(fields) == len(header):
                count += 1
                yield dict(zip(header, fields, strict=True))
        if header is None:
            raise ValueError(f"{path} is empty")


def _well_formed(path: str) -> Iterator[list[str]]:
    """The fields of each non-blank line that parses as CSV, unstripped."""
    for _, text in manifest_lines(path):
        if text is None or not text.strip():
            continue
        try:
            yield csv_fields(text)
        except csv.Error:
            continue


def header_problem(path: str, fmt: ManifestFormat) -> str | None:
    """What is wrong with a CSV manifest's header, checked before a build starts: a first line that is a header
    (it names --uri_column, or all its fields are column-like names and one is a usual column name) but lacks
    --uri_column or --label_column. None when the header is fine or the file has none (a header-less file stays
    header-less: its first line holds a path)."""
    first = next(((n, t) for n, t in manifest_lines(path) if t is None or t.strip()), None)
    if first is None or first[1] is None:
        return None
    try:
        fields = [f.strip() for f in csv_fields(first[1])]
    except csv.Error:
        return None
    names = [f.lower() for f in fields]
    known = {alias for aliases in COLUMN_ALIASES.values() for alias in aliases}
    is_header = fmt.uri_column.lower() in names or (
        all(_HEADER_FIELD.fullmatch(f) for f in fields) and any(n in known for n in names))
    if not is_header:
        return None
    return missing_columns_problem(path, fields, f"the header {first[1].strip()[:200]!r}", fmt)


def _sample_rows(path: str, fmt: ManifestFormat) -> tuple[list[str] | None, list[list[str]]]:
    """The CSV's header (None without one, as the build decides: the first line names --uri_column) and up to
    SAMPLE_ROWS data rows, fields stripped."""
    header: list[str] | None = None
    rows: list[list[str]] = []
    for raw in _well_formed(path):
        fields = [f.strip() for f in raw]
        if header is None and not rows and fmt.uri_column.lower() in (f.lower() for f in fields):
            header = fields
            continue
        rows.append(fields)
        if len(rows) >= SAMPLE_ROWS:
            break
    return header, rows


@dataclass
class _CsvLayout:
    """What the first well-formed line of a CSV said: its fields, lower-cased, and where the split, URI and
    label columns are when it is a header (positions None: the file has no header)."""

    first: list[str] | None = None
    positions: tuple[int | None, int, int | None] | None = None


@dataclass
class CsvLineParser:
    """One CSV line's row, error or None (a header), as `rows` parses it: a line parser (formats.py). The first
    well-formed line fills `layout`; once it has (`settled`), the parser keeps no state from line to line."""

    maker: RowMaker
    layout: _CsvLayout

    def __call__(self, line: int, text: str) -> ManifestRow | ErrorRow | None:
        return _csv_line(self.maker, line, text, self.layout)

    @property
    def settled(self) -> bool:
        return self.layout.first is not None


def _read_layout(maker: RowMaker, layout: _CsvLayout, selection: LineSelection) -> LineSelection:
    """Fills `layout` from the file's first well-formed line, for a read that skips it (an appended manifest's
    first lines); returns the selection with that line uncounted when it is a header, not a data row."""
    for line, text in manifest_lines(maker.source.path):
        if text is None or not text.strip():
            continue
        _csv_line(maker, line, text, layout)
        if layout.first is not None:
            return replace(selection, uncounted=line) if layout.positions is not None else selection
    return selection


def _position(header: list[str], column: str) -> int | None:
    return header.index(column.lower()) if column.lower() in header else None


def csv_fields(text: str) -> list[str]:
    """The fields of one CSV line (no line end), as `csv.reader(strict=True)` reads them. A line without a quote
    or a NUL is split at its commas: the same fields, for a tenth of the cost of a reader per line. Raises
    csv.Error for a malformed line."""
    if '"' not in text and "\0" not in text:
        return text.split(",")
    return next(csv.reader([text], strict=True))


def _csv_line(maker: RowMaker, line: int, text: str, layout: _CsvLayout) -> ManifestRow | ErrorRow | None:
    """The row, error or (for a header) None of one non-blank CSV line; the first well-formed line fills
    `layout`."""
    fmt = maker.fmt
    try:
        fields = csv_fields(text)
    except csv.Error as e:
        return maker.line_error(line, "malformed CSV line", f"{e}; line: {text.strip()[:200]}")
    if layout.first is None:
        layout.first = [f.strip().lower() for f in fields]
        if fmt.uri_column.lower() in layout.first:
            layout.positions = (
                _position(layout.first, fmt.split_column),
                layout.first.index(fmt.uri_column.lower()),
                _position(layout.first, fmt.label_column),
            )
            return None
    if layout.positions is None:
        return _headerless_row(maker, line, fields)
    header = layout.first
    split_pos, uri_pos, label_pos = layout.positions
    if label_pos is None:
        return maker.line_error(line, f"the header has no label column {fmt.label_column!r}",
                                f"header: {','.join(header)}; use --label_column")
    if len(fields) != len(header):
        return _column_count_error(maker, line, fields, f"{len(header)} (as in the header)")
    split = fields[split_pos] if split_pos is not None else ""
    columns = dict(zip(header, fields, strict=True)) if fmt.annotated else None
    return maker.row(line, split, fields[uri_pos], fields[label_pos], columns)


def _headerless_row(maker: RowMaker, line: int, fields: list[str]) -> ManifestRow | ErrorRow:
    """A row of a CSV without a header, in the AutoML Vision layout of the task."""
    fmt = maker.fmt
    if fmt.features:
        return maker.line_error(line, "--feature needs a header row",
                                "features are found by column name; add a header line to the manifest")
    if fmt.task == "detection":
        if len(fields) in (AUTOML_BOX_FIELDS + 2, AUTOML_BOX_FIELDS + 3):
            leading = fields[:-AUTOML_BOX_FIELDS]
            split, uri, label = [""] + leading if len(leading) == 2 else leading
            return maker.row(line, split, uri, label, box_fields=fields[-AUTOML_BOX_FIELDS:])
        return _column_count_error(maker, line, fields, "11 (split,image_uri,label,x1,y1,...,y4) or 10")
    if fmt.task == "multi_label" and len(fields) >= 2:
        # AutoML Vision's multi-label layout: [set,]image_path,label[,label...], one label per column.
        split, rest = (fields[0], fields[1:]) if canonical_split(fields[0]) is not None else ("", fields)
        return maker.row(line, split, rest[0], fmt.list_delimiter.join(rest[1:]))
    if fmt.task == "segmentation":
        if len(fields) == 4:
            mask = {fmt.mask_column.lower(): fields[3]}
            return maker.row(line, fields[0], fields[1], fields[2], mask)
        return _column_count_error(maker, line, fields, "4 (split,image_uri,label,mask_uri)")
    if len(fields) == 3:
        return maker.row(line, fields[0], fields[1], fields[2])
    if len(fields) == 2:
        return maker.row(line, "", fields[0], fields[1])
    return _column_count_error(maker, line, fields, "3 (split,image_uri,label) or 2")


def _column_count_error(maker: RowMaker, line: int, fields: list[str], expected: str) -> ErrorRow:
    return maker.line_error(line, "wrong number of columns",
                            f"got {len(fields)}, expected {expected}; line: {','.join(fields)[:200]}")
