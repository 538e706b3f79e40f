"""One manifest row from its values, checked the same way whatever the format: a ManifestRow, or an ErrorRow
saying what is wrong with it. Every format's reader hands its values to a RowMaker; formats whose rows are
objects of named values share `object_row`."""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable, Mapping

from shardsmith.format.naming import canonical_split
from shardsmith.manifest.annotations import RowProblem, boxes_of, features_from, split_labels
from shardsmith.manifest.look_alike_labels import normalized_label
from shardsmith.manifest.settings import ManifestFormat, resolve_uri
from shardsmith.manifest.source import Source
from shardsmith.printable import control_characters, shown
from shardsmith.rows import Annotation, ErrorRow, ManifestRow

STAGE = "manifest"


class RowMaker:
    """Makes the rows of one Source with one ManifestFormat. Relative URIs resolve against `base_dir` (by default
    the manifest's folder); `not_utf8_reason` is the error of a row whose values are not valid UTF-8."""

    def __init__(self, fmt: ManifestFormat, source: Source, base_dir: str | None = None,
                 not_utf8_reason: str = "line is not valid UTF-8 text"):
        self.fmt = fmt
        self.source = source
        self._base_dir = posixpath.dirname(source.path) if base_dir is None else base_dir
        self._not_utf8_reason = not_utf8_reason

    def row(self, line: int, split: str, uri: str, label: str, columns: Mapping[str, object] | None = None,
            box_fields: list[str] | None = None) -> ManifestRow | ErrorRow:
        """One row, or an ErrorRow saying what is wrong with it. `columns` (lower-cased name -> value) are
        the row's other columns, read for the task and --feature; `box_fields` the AutoML box coordinates."""
        fmt, source = self.fmt, self.source
        split, uri, label = split.strip(), uri.strip(), normalized_label(label.strip(), fmt.normalize_labels)

        def error(reason: str, detail: str = "") -> ErrorRow:
            return ErrorRow(source.path, line, utf8(uri), utf8(split), utf8(label), STAGE, reason, detail)

        text = split + uri + label
        if not text.isascii() and ("\ufffd" in text or utf8(text) != text):
            # U+FFFD: undecodable manifest bytes. Lone surrogates: undecodable file-name bytes (folder input)
            # or JSON escapes; they cannot be written as UTF-8 and would crash the writer and the report.
            return error(self._not_utf8_reason)
        if not uri:
            return error("empty image URI")
        resolved = resolve_uri(uri, self._base_dir, fmt)
        canonical = canonical_split(split) if split else ""
        try:
            if canonical is None:
                raise RowProblem(f"unknown split value {split!r}",
                                 "expected train, validation, test (any case) or empty")
            if not label and not (columns and "boxes" in columns):
                raise RowProblem("empty label")
            if "\n" in label or "\r" in label:
                raise RowProblem("label contains a line break")
            if control_characters(label):
                raise RowProblem("label contains a control character", f"label '{shown(label)}'")
            if not fmt.allows(resolved):
                raise RowProblem("image URI is outside --allowed_prefixes", resolved)
            annotation = self._annotate(label, columns or {}, box_fields) if fmt.annotated else None
        except RowProblem as problem:
            if fmt.task != "detection":
                return error(problem.reason, problem.detail)
            # Rejected with the other box lines of its image, once they are grouped (annotations.py).
            invalid = Annotation(invalid=(problem.reason, problem.detail))
            return ManifestRow(source.path, source.index, line, uri, resolved, canonical or "", label,
                               annotation=invalid)
        return ManifestRow(source.path, source.index, line, uri, resolved, canonical, label, annotation=annotation)

    def _annotate(self, label: str, columns: Mapping[str, object], box_fields: list[str] | None) -> Annotation:
        fmt = self.fmt
        labels: tuple[str, ...] = ()
        boxes: tuple = ()
        mask_uri = ""
        if fmt.task == "multi_label":
            labels = split_labels(label, fmt.list_delimiter)
        elif fmt.task == "detection":
            labels, boxes = boxes_of(label, columns, box_fields)
        elif fmt.task == "segmentation":
            written = text_of(columns.get(fmt.mask_column.lower())).strip()
            if not written:
                raise RowProblem(f"empty mask URI (column {fmt.mask_column!r})")
            mask_uri = resolve_uri(written, self._base_dir, fmt)
            if not fmt.allows(mask_uri):
                raise RowProblem("mask URI is outside --allowed_prefixes", mask_uri)
        features = features_from(columns, fmt.features, fmt.list_delimiter) if fmt.features else ()
        return Annotation(labels=labels, boxes=boxes, mask_uri=mask_uri, features=features)

    def line_error(self, line: int, reason: str, detail: str = "") -> ErrorRow:
        """An error of a whole line (or row), before its values are known."""
        return ErrorRow(self.source.path, line, "", "", "", STAGE, reason, detail)

    def object_row(self, line: int, obj: Mapping[str, object], keys: tuple[str, str, str],
                   container: Callable[[object], str]) -> ManifestRow | ErrorRow:
        """The row of a format whose rows are objects: `obj` holds the row's values by name, `keys` are the
        names of its (split, URI, label). A split, URI or label that is an object or a list where text is
        expected is an ErrorRow (a list of labels is text only for --task multi_label), with the value's kind
        named by `container(value)` ("a JSON object"); a list of labels is joined by --list_delimiter."""
        fmt = self.fmt
        split_key, uri_key, label_key = keys
        label = obj.get(label_key)
        problem = _container_problem(obj, keys, fmt.task, container)
        if problem:
            uri, split = obj.get(uri_key), obj.get(split_key)
            return ErrorRow(self.source.path, line, utf8(_scalar_text(uri)), utf8(_scalar_text(split)), "", STAGE,
                            *problem)
        if isinstance(label, list):
            label = fmt.list_delimiter.join(label_text(item) for item in label)
        columns = {key.lower(): value for key, value in obj.items()} if fmt.annotated else None
        return self.row(line, text_of(obj.get(split_key)), text_of(obj.get(uri_key)), label_text(label), columns)


def label_text(value) -> str:
    """The label a value of a JSON Lines or Parquet row stands for: a string as it is; a boolean or a number as
    JSON writes it (`true`, `7`, `7.5`: the text a person reads in the file, so `true` and "true" are one label);
    null as no label."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    return text_of(value)


def _container_problem(obj: Mapping[str, object], keys: tuple[str, str, str], task: str,
                       container: Callable[[object], str]) -> tuple[str, str] | None:
    """(reason, detail) when a row's split, URI or label is an object or a list where text is expected: Python's
    text of it ("{'x': 1}") is no label."""
    def shown(value) -> str:
        return json.dumps(value, ensure_ascii=False, default=str)[:120]

    split_key, uri_key, label_key = keys
    for name, key in (("split", split_key), ("image URI", uri_key)):
        value = obj.get(key)
        if isinstance(value, dict | list):
            return f"{name} is {container(value)}", f"expected a string; got {shown(value)}"
    label = obj.get(label_key)
    if isinstance(label, dict):
        return f"label is {container(label)}", f"a label is a string or a number; got {shown(label)}"
    if isinstance(label, list):
        if task != "multi_label":
            return (f"label is {container(label)}",
                    f"one label per image (use --task multi_label for several); got {shown(label)}")
        nested = next((item for item in label if isinstance(item, dict | list)), None)
        if nested is not None:
            return f"label list holds {container(nested)}", f"labels are strings or numbers; got {shown(label)}"
    return None


def text_of(value) -> str:
    return "" if value is None else str(value)


def _scalar_text(value) -> str:
    return "" if isinstance(value, dict | list) else text_of(value)


def utf8(text: str) -> str:
    """`text` with each lone surrogate replaced by U+FFFD, so that it encodes as UTF-8."""
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
