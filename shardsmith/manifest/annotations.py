"""What a row says beyond one label: several labels, boxes, a class mask, extra typed columns.

Parsing happens while the manifest is read (shardsmith.manifest); a value that cannot be used makes the
row an error row there, with the column and the value in the reason. Detection manifests hold one line per
box: `merge_box_rows` (run by the GroupBoxRows stage) merges the lines of one image into one row, before any
placement, and rejects every line of an image when one of its boxes is bad, so no image is written with an
object left out. Nothing here reads image bytes.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Iterator, Mapping

from shardsmith.rows import Box, ErrorRow, ManifestRow

STAGE = "manifest"
BOX_COLUMNS = ("xmin", "ymin", "xmax", "ymax")
# AutoML Vision object detection, after split, path and label: x1,y1,x2,y2,x3,y3,x4,y4 (the four corners
# from top left, clockwise), where the two-vertex form leaves x2,y2,x4,y4 empty.
AUTOML_BOX_FIELDS = 8


class RowProblem(Exception):
    """A value in a row that cannot be used; `reason` names the column and says what is wrong."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


def split_labels(value: object, delimiter: str) -> tuple[str, ...]:
    """The distinct labels of a multi-label cell (text split at `delimiter`, or a JSON list), sorted."""
    items = value if isinstance(value, list) else str(value).split(delimiter)
    labels = sorted({str(item).strip() for item in items} - {""})
    if not labels:
        raise RowProblem("empty label")
    for label in labels:
        if "\n" in label or "\r" in label:
            raise RowProblem("label contains a line break")
    return tuple(labels)


def parse_feature(name: str, kind: str, value: object, delimiter: str) -> object:
    """A --feature column's value as int, float, str, or a tuple of one of them (for a *_list type).
    CSV cells are text; JSON Lines may hold numbers and lists directly. An empty cell of a list type is an
    empty list; of a scalar type it is an error (there is no value to store)."""
    scalar = kind.removesuffix("_list")
    if kind != scalar:
        if isinstance(value, list):
            items = value
        else:
            text = "" if value is None else str(value).strip()
            items = [item.strip() for item in text.split(delimiter)] if text else []
        return tuple(_scalar(name, scalar, item) for item in items)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise RowProblem(f"feature {name!r} is empty", f"--feature {name}:{kind} needs a value in every row")
    return _scalar(name, scalar, value)


def _scalar(name: str, kind: str, value: object) -> object:
    if kind == "string":
        if isinstance(value, (list, dict)):
            raise RowProblem(f"feature {name!r} is not a string", repr(value)[:200])
        return str(value)
    try:
        if isinstance(value, (bool, list, dict)):
            raise ValueError
        if kind == "int":
            if isinstance(value, float):
                if not value.is_integer():
                    raise ValueError
                return int(value)
            number = int(str(value).strip())
            if not -(1 << 63) <= number < (1 << 63):
                raise ValueError
            return number
        number = float(str(value).strip()) if not isinstance(value, (int, float)) else float(value)
        if not math.isfinite(number):
            raise ValueError
        return number
    except ValueError:
        raise RowProblem(f"feature {name!r} is not {'an int' if kind == 'int' else 'a float'}",
                         f"value {value!r}"[:200]) from None


def automl_box(fields: list[str]) -> Box:
    """The box of an AutoML Vision object-detection line's eight coordinate fields (two or four vertices)."""
    if len(fields) != AUTOML_BOX_FIELDS:
        raise RowProblem("wrong number of box coordinates", f"got {len(fields)}, expected 8 (x1,y1,x2,y2,x3,y3,x4,y4)")
    x1, y1, x2, y2, x3, y3, x4, y4 = (f.strip() for f in fields)
    if not (x2 or y2 or x4 or y4):
        return box_from(x1, y1, x3, y3)
    corners = [(_coordinate("x", x), _coordinate("y", y)) for x, y in ((x1, y1), (x2, y2), (x3, y3), (x4, y4))]
    xs, ys = [x for x, _ in corners], [y for _, y in corners]
    box = (xs[0], ys[0], xs[2], ys[2])
    check_box(box)
    if len(set(xs)) != 2 or len(set(ys)) != 2:
        raise RowProblem("box vertices do not form an axis-aligned rectangle", ",".join(fields))
    return box


def box_from(xmin: object, ymin: object, xmax: object, ymax: object) -> Box:
    box = (_coordinate("xmin", xmin), _coordinate("ymin", ymin), _coordinate("xmax", xmax), _coordinate("ymax", ymax))
    check_box(box)
    return box


def check_box(box: Box) -> None:
    """Boxes are normalized: every coordinate in [0, 1], and min < max on both axes."""
    if any(not 0.0 <= value <= 1.0 for value in box):
        raise RowProblem("box coordinate outside [0, 1]", "coordinates are fractions of width and height: "
                         + ",".join(f"{v:g}" for v in box))
    xmin, ymin, xmax, ymax = box
    if not (xmin < xmax and ymin < ymax):
        raise RowProblem("box has min >= max", f"xmin={xmin:g} xmax={xmax:g} ymin={ymin:g} ymax={ymax:g}")


def _coordinate(name: str, value: object) -> float:
    try:
        if isinstance(value, bool):
            raise ValueError
        number = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        raise RowProblem(f"box {name} is not a number", f"value {value!r}"[:200]) from None
    if not math.isfinite(number):
        raise RowProblem(f"box {name} is not a number", f"value {value!r}")
    return number


def features_from(columns: Mapping[str, object], features: tuple[tuple[str, str], ...],
                  delimiter: str) -> tuple[tuple[str, object], ...]:
    """The declared features of one row, from its columns by (lower-cased) name."""
    values = []
    for name, kind in features:
        if name.lower() not in columns:
            raise RowProblem(f"no column {name!r} for --feature {name}:{kind}",
                             "features are found by the header's column names (CSV) or keys (JSON Lines)")
        values.append((name, parse_feature(name, kind, columns[name.lower()], delimiter)))
    return tuple(values)


def boxes_of(label: str, columns: Mapping[str, object], box_fields: list[str] | None) -> tuple[tuple, tuple]:
    """(labels, boxes) of a detection row: AutoML coordinate fields, xmin/ymin/xmax/ymax columns, or a JSON
    Lines "boxes" list of {label, xmin, ymin, xmax, ymax} (one line per image)."""
    if "boxes" in columns:
        items = columns["boxes"]
        if not isinstance(items, list) or not items:
            raise RowProblem("'boxes' is not a non-empty list", "expected [{label, xmin, ymin, xmax, ymax}, ...]")
        labels, boxes = [], []
        for number, item in enumerate(items, start=1):
            if not isinstance(item, dict):
                raise RowProblem(f"box {number} is not an object", repr(item)[:200])
            box_label = _cell(item.get("label")).strip() or label
            if not box_label or "\n" in box_label or "\r" in box_label or not _encodable(box_label):
                raise RowProblem(f"box {number} has no usable label", repr(item.get("label"))[:200])
            labels.append(box_label)
            boxes.append(box_from(*(item.get(c) for c in BOX_COLUMNS)))
        return tuple(labels), tuple(boxes)
    if box_fields is not None:
        return (label,), (automl_box(box_fields),)
    missing = [c for c in BOX_COLUMNS if c not in columns]
    if missing:
        raise RowProblem("no box columns", f"detection reads {','.join(BOX_COLUMNS)} (header or JSON keys) or the "
                         f"AutoML layout without a header; missing {','.join(missing)}")
    return (label,), (box_from(*(columns[c] for c in BOX_COLUMNS)),)



def _cell(value: object) -> str:
    return "" if value is None else str(value)


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates, from JSON escapes
        return False
    return True


# Grouping the box lines of one image -------------------------------------------------------------------
def merge_box_rows(rows: Iterable[ManifestRow], delimiter: str) -> Iterator[ManifestRow | ErrorRow]:
    """The lines of one image (one box each, same manifest and URI) -> one row holding every box, in line
    order; or, when any line is invalid or the lines disagree on the split, one ErrorRow per line."""
    rows = sorted(rows, key=lambda r: r.line)
    invalid = [r for r in rows if r.annotation.invalid is not None]
    problem = problem_detail = ""
    if invalid:
        first = invalid[0]
        problem = f"another box line of this image is invalid (line {first.line}: {first.annotation.invalid[0]})"
        problem_detail = "an image is written with all of its boxes or not at all"
    elif len({r.split for r in rows}) > 1:
        problem = "the box lines of this image name different splits"
        problem_detail = "splits by line: " + ", ".join(f"{r.line}: {r.split or '(empty)'}" for r in rows)
    if problem:
        for row in rows:
            reason, detail = row.annotation.invalid or (problem, problem_detail)
            yield ErrorRow.for_row(row, STAGE, reason, detail)
        return
    labels = tuple(label for r in rows for label in r.annotation.labels)
    annotation = dataclasses.replace(
        rows[0].annotation,
        labels=labels,
        boxes=tuple(box for r in rows for box in r.annotation.boxes),
        lines=tuple(line for r in rows for line in r.lines),
    )
    yield dataclasses.replace(rows[0], label=delimiter.join(sorted(set(labels))), annotation=annotation)
