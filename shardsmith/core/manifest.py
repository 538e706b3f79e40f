"""The one manifest parser: CSV and JSON Lines manifests, and folders of class folders, into ManifestRows.

Beam-free and TensorFlow-free: the build's ReadManifest stage, preflight (listing the inputs), `schema` and
`inspect` all read manifests through this module. Every data row comes out exactly once: as a ManifestRow or
as an ErrorRow saying what is wrong with it. Blank lines and a CSV header are not data rows. No line can stop a
read: one that cannot be parsed, for whatever reason, or that is longer than MAX_MANIFEST_LINE_BYTES is an
ErrorRow. Reading streams each file and holds at most one line of it (up to that bound) in memory. Local files
are opened directly, other URIs (gs://) through Beam's FileSystems, imported only then: the CLI checks local
manifests before it imports Beam.
"""

from __future__ import annotations

import codecs
import csv
import json
import os
import posixpath
import re
import stat
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields
from typing import BinaryIO

from shardsmith.core.annotations import (
    AUTOML_BOX_FIELDS,
    RowProblem,
    boxes_of,
    features_from,
    split_labels,
)
from shardsmith.core.rows import Annotation, ErrorRow, ManifestRow
from shardsmith.errors import UsageError
from shardsmith.format.naming import canonical_split, is_remote
from shardsmith.storage.local_files import NotARegularFile, kind_of, open_regular_file

STAGE = "manifest"
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp")
# What a column of image paths looks like to the swapped-columns check: the formats read, and TIFF (re-encoded).
IMAGE_PATH_EXTENSIONS = (*IMAGE_EXTENSIONS, ".tif", ".tiff")
JSONL_EXTENSIONS = (".jsonl", ".ndjson", ".json")
# A longer manifest line is an error row, skipped without being held in memory: no real row comes near it.
MAX_MANIFEST_LINE_BYTES = 1 << 20
# Bytes read from a manifest at a time; memory per manifest read is at most this plus MAX_MANIFEST_LINE_BYTES.
MANIFEST_READ_CHUNK_BYTES = 64 << 10
GLOB_CHARS = "*?["  # a --manifest holding one of these is a glob


@dataclass(frozen=True)
class ManifestFormat:
    """How to read a manifest: column names and optional URI prefix rewrites (OLD, NEW)."""

    split_column: str = "split"
    uri_column: str = "image_uri"
    label_column: str = "label"
    path_map: tuple[tuple[str, str], ...] = ()
    allowed_prefixes: tuple[str, ...] = ()  # each ends with "/", local ones real paths; empty: anywhere
    task: str = "classification"
    list_delimiter: str = ";"
    mask_column: str = "mask_uri"
    features: tuple[tuple[str, str], ...] = ()  # (column name, type)

    @classmethod
    def from_recorded(cls, recorded: dict) -> ManifestFormat:
        """The format a build read its manifests with, from the options recorded in its metadata.json (see
        pipeline/options.py BuildOptions.recorded); fields a build did not record keep their defaults."""
        known = {f.name for f in fields(cls)}
        values = {key: value for key, value in recorded.items() if key in known}
        for key in ("path_map", "features"):
            if key in values:
                values[key] = tuple(tuple(pair) for pair in values[key])
        if "allowed_prefixes" in values:
            values["allowed_prefixes"] = tuple(values["allowed_prefixes"])
        return cls(**values)

    @property
    def annotated(self) -> bool:
        """Whether rows carry more than one label (an Annotation)."""
        return self.task != "classification" or bool(self.features)

    def allows(self, resolved_uri: str) -> bool:
        """Whether a resolved URI lies under an allowed prefix. A local path is compared by its real path (every
        symlink and `..` resolved, as opening it would), so neither a symlink nor `..` leads out of a prefix; a
        remote URI with a `..` segment is never allowed. Only names are looked at, never a file's content, so
        the answer is the same whether the target exists or not."""
        if not self.allowed_prefixes:
            return True
        if is_remote(resolved_uri):
            if ".." in resolved_uri.split("/"):
                return False
        else:
            resolved_uri = os.path.realpath(resolved_uri)
        return any(resolved_uri.startswith(prefix) for prefix in self.allowed_prefixes)


@dataclass(frozen=True)
class Source:
    """One input: a manifest file or a class folder, with its position in the sorted input list."""

    path: str
    index: int
    kind: str  # "csv" | "jsonl" | "folder"


def source_kind(path: str, is_folder: bool) -> str:
    if is_folder:
        return "folder"
    return "jsonl" if path.lower().endswith(JSONL_EXTENSIONS) else "csv"


def looks_like_image_path(value: str) -> bool:
    """Whether a manifest value ends like an image file name (any case): not a label."""
    return value.strip().lower().endswith(IMAGE_PATH_EXTENSIONS)


def resolve_uri(uri: str, base_dir: str, fmt: ManifestFormat) -> str:
    """Applies the first matching --path_map prefix, then resolves a relative path against `base_dir`."""
    for old, new in fmt.path_map:
        if uri.startswith(old):
            uri = new + uri[len(old):]
            break
    if uri.startswith("file://"):
        uri = uri[len("file://"):]
    if is_remote(uri) or uri.startswith("/"):
        return uri
    base = base_dir.rstrip("/")
    return f"{base}/{uri}" if is_remote(base) else posixpath.normpath(posixpath.join(base, uri))


def manifest_lines(path: str) -> Iterator[tuple[int, str | None]]:
    """(line number, text without its line end) for each line of a manifest, or (line number, None) for a line
    longer than MAX_MANIFEST_LINE_BYTES, which is skipped to its end unread. A UTF-8 BOM at the start is dropped;
    undecodable bytes become U+FFFD, so that one bad line is one error row, not a dead job."""
    with _open_binary(path) as raw:
        for number, line in enumerate(_bounded_lines(raw, MAX_MANIFEST_LINE_BYTES), start=1):
            if line is None:
                yield number, None
                continue
            if number == 1 and line.startswith(codecs.BOM_UTF8):
                line = line[len(codecs.BOM_UTF8):]
            yield number, line.decode("utf-8", "replace")


def _open_binary(path: str) -> BinaryIO:
    """A local file as Beam's LocalFileSystem opens it (uncompressed, binary), without importing Beam (the
    header check runs before the CLI imports it); other URIs through Beam's FileSystems. A local path that is not
    a regular file when opened is a UsageError, at once."""
    if not is_remote(path):
        try:
            return open_regular_file(path)
        except NotARegularFile as e:  # replaced since resolve_sources looked: never wait on a named pipe
            raise UsageError(f"manifest {path} is {e.kind}, not a regular file") from None
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


# Column names people give the three columns shardsmith reads, each mapped to the flag that names it.
COLUMN_ALIASES = {
    "--uri_column": ("image_uri", "uri", "path", "filepath", "file_path", "file", "filename", "image", "image_path",
                     "gcs_path", "url"),
    "--label_column": ("label", "labels", "class", "class_name", "category", "target", "tag"),
    "--split_column": ("split", "set", "subset", "fold", "partition", "ml_use"),
}
_HEADER_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_ .-]*")


def header_problem(path: str, fmt: ManifestFormat) -> str | None:
    """What is wrong with a CSV manifest's header, checked before a build starts: a first line that is a header
    (it names --uri_column, or all its fields are column-like names and one is a usual column name) but lacks
    --uri_column or --label_column. None when the header is fine or the file has none (a header-less file stays
    header-less: its first line holds a path)."""
    first = next(((n, t) for n, t in manifest_lines(path) if t is None or t.strip()), None)
    if first is None or first[1] is None:
        return None
    try:
        fields = [f.strip() for f in next(csv.reader([first[1]], strict=True))]
    except csv.Error:
        return None
    names = [f.lower() for f in fields]
    known = {alias for aliases in COLUMN_ALIASES.values() for alias in aliases}
    is_header = fmt.uri_column.lower() in names or (
        all(_HEADER_FIELD.fullmatch(f) for f in fields) and any(n in known for n in names))
    if not is_header:
        return None
    wanted = {"--uri_column": fmt.uri_column, "--label_column": fmt.label_column}
    missing = [flag for flag, column in wanted.items() if column.lower() not in names]
    if fmt.task == "detection" and "--label_column" in missing and "boxes" in names:
        missing.remove("--label_column")
    if not missing:
        return None
    suggestions = []
    for flag, aliases in COLUMN_ALIASES.items():
        match = next((f for f, n in zip(fields, names, strict=True) if n in aliases), None)
        current = {"--uri_column": fmt.uri_column, "--label_column": fmt.label_column,
                   "--split_column": fmt.split_column}[flag]
        if match is not None and match.lower() != current.lower():
            suggestions.append(f"{flag} {match}")
    lacking = " and ".join(f"no {wanted[flag]!r} column ({flag})" for flag in missing)
    fix = f"; try {' '.join(suggestions)}" if suggestions else f"; name its columns with {', '.join(missing)}"
    return f"manifest {path} has the header {first[1].strip()[:200]!r} with {lacking}{fix}"


def manifest_columns(path: str, limit: int) -> Iterator[dict[str, object]]:
    """The first `limit` data rows of a manifest as {column name as written: value}, read with the build's line
    reader: a CSV's first line is its header (rows of another length are skipped), a JSON Lines row is an
    object (other lines are skipped: the build reports them). Raises ValueError for a CSV with no header."""
    is_jsonl = source_kind(path, False) == "jsonl"
    header: list[str] | None = None
    count = 0
    for _, text in manifest_lines(path):
        if count >= limit:
            return
        if text is None or not text.strip():
            continue
        if is_jsonl:
            try:
                obj = json.loads(text)
            except ValueError:
                continue
            if isinstance(obj, dict):
                count += 1
                yield {str(key): value for key, value in obj.items()}
            continue
        try:
            fields = next(csv.reader([text], strict=True))
        except csv.Error:
            continue
        if header is None:
            header = [name.strip() for name in fields]
        elif len(fields) == len(header):
            count += 1
            yield dict(zip(header, fields, strict=True))
    if not is_jsonl and header is None:
        raise ValueError(f"{path} is empty")


def _bounded_lines(raw: BinaryIO, limit: int, chunk_bytes: int = MANIFEST_READ_CHUNK_BYTES) -> Iterator[bytes | None]:
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


def _position(header: list[str], column: str) -> int | None:
    return header.index(column.lower()) if column.lower() in header else None


class ManifestParser:
    """Reads Sources with one ManifestFormat: `parse(source)` yields its ManifestRows and ErrorRows in file
    order."""

    def __init__(self, fmt: ManifestFormat):
        self._fmt = fmt

    def parse(self, source: Source) -> Iterator[ManifestRow | ErrorRow]:
        if source.kind == "folder":
            return self._read_folder(source)
        if source.kind == "jsonl":
            return self._read_jsonl(source)
        return self._read_csv(source)

    # Rows -----------------------------------------------------------------------------------------
    def _make_row(self, source: Source, line: int, split: str, uri: str, label: str,
                  columns: Mapping[str, object] | None = None, box_fields: list[str] | None = None):
        """One row, or an ErrorRow saying what is wrong with it. `columns` (lower-cased name -> value) are
        the row's other columns, read for the task and --feature; `box_fields` the AutoML box coordinates."""
        fmt = self._fmt
        split, uri, label = split.strip(), uri.strip(), label.strip()

        def error(reason: str, detail: str = "") -> ErrorRow:
            return ErrorRow(source.path, line, _utf8(uri), _utf8(split), _utf8(label), STAGE, reason, detail)

        text = split + uri + label
        if "\ufffd" in text or _utf8(text) != text:
            # U+FFFD: undecodable manifest bytes. Lone surrogates: undecodable file-name bytes (folder input)
            # or JSON escapes; they cannot be written as UTF-8 and would crash the writer and the report.
            return error("file name is not valid UTF-8" if source.kind == "folder"
                         else "line is not valid UTF-8 text")
        if not uri:
            return error("empty image URI")
        base_dir = source.path if source.kind == "folder" else posixpath.dirname(source.path)
        resolved = resolve_uri(uri, base_dir, fmt)
        canonical = canonical_split(split) if split else ""
        try:
            if canonical is None:
                raise RowProblem(f"unknown split value {split!r}",
                                 "expected train, validation, test (any case) or empty")
            if not label and not (columns and "boxes" in columns):
                raise RowProblem("empty label")
            if "\n" in label or "\r" in label:
                raise RowProblem("label contains a line break")
            if not fmt.allows(resolved):
                raise RowProblem("image URI is outside --allowed_prefixes", resolved)
            annotation = self._annotate(label, columns or {}, box_fields, base_dir) if fmt.annotated else None
        except RowProblem as problem:
            if fmt.task != "detection":
                return error(problem.reason, problem.detail)
            # Rejected with the other box lines of its image, once they are grouped (annotations.py).
            invalid = Annotation(invalid=(problem.reason, problem.detail))
            return ManifestRow(source.path, source.index, line, uri, resolved, canonical or "", label,
                               annotation=invalid)
        return ManifestRow(source.path, source.index, line, uri, resolved, canonical, label, annotation=annotation)

    def _annotate(self, label: str, columns: Mapping[str, object], box_fields: list[str] | None,
                  base_dir: str) -> Annotation:
        fmt = self._fmt
        labels: tuple[str, ...] = ()
        boxes: tuple = ()
        mask_uri = ""
        if fmt.task == "multi_label":
            labels = split_labels(label, fmt.list_delimiter)
        elif fmt.task == "detection":
            labels, boxes = boxes_of(label, columns, box_fields)
        elif fmt.task == "segmentation":
            written = _text(columns.get(fmt.mask_column.lower())).strip()
            if not written:
                raise RowProblem(f"empty mask URI (column {fmt.mask_column!r})")
            mask_uri = resolve_uri(written, base_dir, fmt)
            if not fmt.allows(mask_uri):
                raise RowProblem("mask URI is outside --allowed_prefixes", mask_uri)
        features = features_from(columns, fmt.features, fmt.list_delimiter) if fmt.features else ()
        return Annotation(labels=labels, boxes=boxes, mask_uri=mask_uri, features=features)

    # Lines --------------------------------------------------------------------------------------------
    def _lines(self, source: Source, parse_line: Callable[[int, str], object]) -> Iterator:
        """`parse_line(line, text)` over each non-blank line, its exceptions and over-long lines made error rows
        of their line: whatever a line holds, the rest of the manifest is read."""
        for line, text in manifest_lines(source.path):
            if text is None:
                yield self._line_error(source, line, f"line is longer than {MAX_MANIFEST_LINE_BYTES >> 20} MiB",
                                       f"at most {MAX_MANIFEST_LINE_BYTES} bytes per line")
                continue
            if not text.strip():
                continue
            try:
                item = parse_line(line, text)
            except Exception as e:  # e.g. RecursionError from JSON nested 100,000 deep
                item = self._line_error(source, line, "line could not be parsed",
                                        f"{type(e).__name__}: {e}"[:300])
            if item is not None:
                yield item

    # CSV --------------------------------------------------------------------------------------------
    def _read_csv(self, source: Source) -> Iterator:
        """Parses each physical line on its own: no manifest field may hold a line break, and this way a
        stray quote costs one error line instead of swallowing the rest of the file into one field."""
        layout = _CsvLayout()
        return self._lines(source, lambda line, text: self._csv_line(source, line, text, layout))

    def _csv_line(self, source: Source, line: int, text: str, layout: _CsvLayout):
        """The row, error or (for a header) None of one non-blank CSV line; the first well-formed line fills
        `layout`."""
        fmt = self._fmt
        try:
            fields = next(csv.reader([text], strict=True))
        except csv.Error as e:
            return self._line_error(source, line, "malformed CSV line", f"{e}; line: {text.strip()[:200]}")
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
            return self._headerless_row(source, line, fields)
        header = layout.first
        split_pos, uri_pos, label_pos = layout.positions
        if label_pos is None:
            return self._line_error(source, line, f"the header has no label column {fmt.label_column!r}",
                                    f"header: {','.join(header)}; use --label_column")
        if len(fields) != len(header):
            return self._column_count_error(source, line, fields, f"{len(header)} (as in the header)")
        split = fields[split_pos] if split_pos is not None else ""
        columns = dict(zip(header, fields, strict=True)) if fmt.annotated else None
        return self._make_row(source, line, split, fields[uri_pos], fields[label_pos], columns)

    def _headerless_row(self, source: Source, line: int, fields: list[str]):
        """A row of a CSV without a header, in the AutoML Vision layout of the task."""
        fmt = self._fmt
        if fmt.features:
            return self._line_error(source, line, "--feature needs a header row",
                                    "features are found by column name; add a header line to the manifest")
        if fmt.task == "detection":
            if len(fields) in (AUTOML_BOX_FIELDS + 2, AUTOML_BOX_FIELDS + 3):
                leading = fields[:-AUTOML_BOX_FIELDS]
                split, uri, label = [""] + leading if len(leading) == 2 else leading
                return self._make_row(source, line, split, uri, label, box_fields=fields[-AUTOML_BOX_FIELDS:])
            return self._column_count_error(source, line, fields, "11 (split,image_uri,label,x1,y1,...,y4) or 10")
        if fmt.task == "multi_label" and len(fields) >= 2:
            # AutoML Vision's multi-label layout: [set,]image_path,label[,label...], one label per column.
            split, rest = (fields[0], fields[1:]) if canonical_split(fields[0]) is not None else ("", fields)
            return self._make_row(source, line, split, rest[0], fmt.list_delimiter.join(rest[1:]))
        if fmt.task == "segmentation":
            if len(fields) == 4:
                mask = {fmt.mask_column.lower(): fields[3]}
                return self._make_row(source, line, fields[0], fields[1], fields[2], mask)
            return self._column_count_error(source, line, fields, "4 (split,image_uri,label,mask_uri)")
        if len(fields) == 3:
            return self._make_row(source, line, fields[0], fields[1], fields[2])
        if len(fields) == 2:
            return self._make_row(source, line, "", fields[0], fields[1])
        return self._column_count_error(source, line, fields, "3 (split,image_uri,label) or 2")

    @staticmethod
    def _line_error(source: Source, line: int, reason: str, detail: str = "") -> ErrorRow:
        return ErrorRow(source.path, line, "", "", "", STAGE, reason, detail)

    @classmethod
    def _column_count_error(cls, source: Source, line: int, fields: list[str], expected: str):
        return cls._line_error(source, line, "wrong number of columns",
                               f"got {len(fields)}, expected {expected}; line: {','.join(fields)[:200]}")

    # JSON Lines -------------------------------------------------------------------------------------
    def _read_jsonl(self, source: Source) -> Iterator:
        return self._lines(source, lambda line, text: self._jsonl_line(source, line, text))

    def _jsonl_line(self, source: Source, line: int, text: str):
        fmt = self._fmt
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            return self._line_error(source, line, "line is not valid JSON", str(e))
        if not isinstance(obj, dict):
            return self._line_error(source, line, "JSON line is not an object", text.strip()[:200])
        label = obj.get(fmt.label_column)
        problem = _json_value_problem(obj, fmt)
        if problem:
            uri, split = obj.get(fmt.uri_column), obj.get(fmt.split_column)
            return ErrorRow(source.path, line, _utf8(_scalar_text(uri)), _utf8(_scalar_text(split)), "", STAGE,
                            *problem)
        if isinstance(label, list):
            label = fmt.list_delimiter.join(_text(item) for item in label)
        columns = {key.lower(): value for key, value in obj.items()} if fmt.annotated else None
        return self._make_row(source, line, _text(obj.get(fmt.split_column)), _text(obj.get(fmt.uri_column)),
                              _text(label), columns)

    # Folder -----------------------------------------------------------------------------------------
    def _read_folder(self, source: Source) -> Iterator:
        root = source.path.rstrip("/")
        from apache_beam.io.filesystems import FileSystems

        matched = FileSystems.match([root + "/**"])[0].metadata_list
        relative = sorted(m.path[len(root) + 1:] for m in matched)
        images = [r for r in relative if r.lower().endswith(IMAGE_EXTENSIONS) and not _hidden(r)]
        top_dirs = {r.split("/")[0] for r in images if "/" in r}
        split_layout = bool(top_dirs) and all(canonical_split(d) for d in top_dirs)
        for line, rel in enumerate(images, start=1):
            parts = rel.split("/")
            if split_layout and len(parts) == 3:
                split, label = parts[0], parts[1]
            elif not split_layout and len(parts) == 2:
                split, label = "", parts[0]
            else:
                layout = "<split>/<label>/<file>" if split_layout else "<label>/<file>"
                yield ErrorRow(source.path, line, _utf8(rel), "", "", STAGE, "file is not in a class folder",
                               f"expected {layout} under {root}")
                continue
            yield self._make_row(source, line, split, rel, label)


@dataclass
class _CsvLayout:
    """What the first well-formed line of a CSV said: its fields, lower-cased, and where the split, URI and
    label columns are when it is a header (positions None: the file has no header)."""

    first: list[str] | None = None
    positions: tuple[int | None, int, int | None] | None = None


def _text(value) -> str:
    return "" if value is None else str(value)


def _scalar_text(value) -> str:
    return "" if isinstance(value, dict | list) else _text(value)


def _json_value_problem(obj: dict, fmt: ManifestFormat) -> tuple[str, str] | None:
    """(reason, detail) when a JSON line's split, URI or label is an object or a list where text is expected
    (a list of labels is text only for --task multi_label): Python's text of it ("{'x': 1}") is no label."""
    def shown(value) -> str:
        return json.dumps(value, ensure_ascii=False)[:120]

    for name, key in (("split", fmt.split_column), ("image URI", fmt.uri_column)):
        value = obj.get(key)
        if isinstance(value, dict | list):
            kind = "object" if isinstance(value, dict) else "list"
            return f"{name} is a JSON {kind}", f"expected a string; got {shown(value)}"
    label = obj.get(fmt.label_column)
    if isinstance(label, dict):
        return "label is a JSON object", f"a label is a string or a number; got {shown(label)}"
    if isinstance(label, list):
        if fmt.task != "multi_label":
            return ("label is a JSON list",
                    f"one label per image (use --task multi_label for several); got {shown(label)}")
        nested = next((item for item in label if isinstance(item, dict | list)), None)
        if nested is not None:
            kind = "object" if isinstance(nested, dict) else "list"
            return f"label list holds a JSON {kind}", f"labels are strings or numbers; got {shown(label)}"
    return None


def _utf8(text: str) -> str:
    """`text` with each lone surrogate replaced by U+FFFD, so that it encodes as UTF-8."""
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def _hidden(relative: str) -> bool:
    return any(part.startswith(".") for part in relative.split("/"))


def resolve_sources(manifests: tuple[str, ...]) -> list[Source]:
    """Expands globs and tells manifests from folders. Sorted, so source indexes do not depend on the order
    the filesystem lists them in. A local manifest that is not a regular file is a UsageError: reading a FIFO
    would wait for a writer forever, and a device such as /dev/zero never ends. Beam's FileSystems is imported
    only for a glob or a remote path: a missing local manifest is reported before Beam loads (seconds)."""
    paths: list[tuple[str, bool]] = []
    for given in manifests:
        if any(c in given for c in GLOB_CHARS):
            from apache_beam.io.filesystems import FileSystems

            try:
                matched = FileSystems.match([given])[0].metadata_list
            except Exception:
                matched = []
            if not matched:
                raise UsageError(f"no manifest matches {given!r}")
            paths.extend((m.path, False) for m in matched)
        elif _is_folder(given):
            paths.append((given.rstrip("/"), True))
        elif _exists(given):
            paths.append((given, False))
        else:
            raise UsageError(f"manifest not found: {given}")
    for path, is_folder in paths:
        if is_folder or is_remote(path):
            continue
        try:
            mode = os.stat(path).st_mode
        except OSError as e:
            raise UsageError(f"manifest cannot be read: {path}: {e.strerror}") from None
        if not stat.S_ISREG(mode):
            raise UsageError(f"manifest {path} is {kind_of(mode)}, not a regular file")
    unique = sorted(set(paths))
    return [Source(path, index, source_kind(path, is_folder)) for index, (path, is_folder) in enumerate(unique)]


def _exists(path: str) -> bool:
    if not is_remote(path):
        return os.path.exists(path)
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.exists(path)


def _is_folder(path: str) -> bool:
    if not is_remote(path):
        return os.path.isdir(path)
    if path.endswith("/"):
        return True
    from apache_beam.io.filesystems import FileSystems

    try:
        FileSystems.get_filesystem(path).metadata(path)
        return False
    except Exception:
        return bool(FileSystems.match([path.rstrip("/") + "/**"], limits=[1])[0].metadata_list)
