"""`--label_file FILE`: a fixed label list, read once by the launcher before Beam starts.

One label a line, UTF-8; surrounding whitespace is trimmed and blank lines are skipped. Ids are 0..N-1 in the
file's order. Guarantee: `read_label_list` returns at least one label, each once, or raises a one-line
UsageError naming the file (and the line, for a duplicate or undecodable one). The file may be local or gs://.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardsmith import storage
from shardsmith.errors import UsageError
from shardsmith.manifest.look_alike_labels import normalized_label


@dataclass(frozen=True)
class FixedLabels:
    """`--label_file FILE`: the labels in id order, as the launcher read them from `path`. Or, for an
    --incremental build, the published version's labels (`path` ""), which keep their ids while labels seen for
    the first time get the next ones (`extendable`)."""

    labels: tuple[str, ...]
    path: str
    extendable: bool = False


def parse_label_list(data: bytes, path: str, normalization: str = "none") -> tuple[str, ...]:
    """The labels of a --label_file file's bytes, in order; UsageError for an undecodable line, a duplicate or no
    label at all."""
    labels: list[str] = []
    first_line: dict[str, int] = {}
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            label = normalized_label(raw.decode("utf-8").strip(), normalization)
        except UnicodeDecodeError:
            raise UsageError(f"--label_file {path} line {number}: not UTF-8 text") from None
        if not label:
            continue
        if label in first_line:
            raise UsageError(f"--label_file {path} line {number}: label {label!r} is already on line "
                             f"{first_line[label]}; each label may be listed once")
        first_line[label] = number
        labels.append(label)
    if not labels:
        raise UsageError(f"--label_file {path} lists no label: write one label a line")
    return tuple(labels)


def read_label_list(path: str, normalization: str = "none") -> FixedLabels:
    """The labels listed in the file at `path` (local or gs://), in file order, normalized as --normalize_labels
    `normalization` says; UsageError (one line) if it cannot be read or is not a valid label list."""
    try:
        data = storage.read_bytes(path)
    except OSError as e:
        raise UsageError(f"--label_file {path} cannot be read: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
                         ) from None
    if data is None:
        raise UsageError(f"--label_file {path} does not exist")
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]  # a byte order mark some editors write
    return FixedLabels(parse_label_list(data, path, normalization), path)


MAX_MOVED_IDS_SHOWN = 5


def moved_ids_line(before: tuple[str, ...], after: tuple[str, ...]) -> str | None:
    """One line naming the labels whose id differs between the version a rebuild replaced (`before`) and the
    new one (`after`), or None when every label both list keeps its id: a change of ids is never silent."""
    new_ids = {label: label_id for label_id, label in enumerate(after)}
    moved = [(label, old_id, new_ids[label]) for old_id, label in enumerate(before)
             if label in new_ids and new_ids[label] != old_id]
    if not moved:
        return None
    shown = ", ".join(f"{label!r} {old_id} -> {new_id}" for label, old_id, new_id in moved[:MAX_MOVED_IDS_SHOWN])
    more = f" and {len(moved) - MAX_MOVED_IDS_SHOWN} more" if len(moved) > MAX_MOVED_IDS_SHOWN else ""
    return (f"label ids changed from the version this build replaced: {shown}{more}; a model trained on it reads "
            "these records' ids as other labels (pass --label_file with its labels.txt to keep its ids)")
