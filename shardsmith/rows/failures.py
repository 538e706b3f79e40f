"""Why rows failed, in one line a person can act on: the most common reasons with their counts and one example
each, and, when one reason accounts for nearly every failure and has a known cause, the fix.

The reason is an ErrorRow's stable grouping key (stage and reason); the example names the row (its URI, or its
manifest and line; a class folder's row, its image file) and the reason's detail, which carries the row's own values.
"""

from __future__ import annotations

import dataclasses
import posixpath
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from shardsmith.format.metadata import parse_errors, reason_key
from shardsmith.images.image_file_names import looks_like_image_path
from shardsmith.rows import FOLDER_SUFFIX, ErrorRow

MAX_REASONS_SHOWN = 3
MAX_DETAIL_CHARS = 160
# A reason behind at least this share of the failed rows is taken to have one cause, worth a hint.
DOMINANT_SHARE = 0.9


def _example(error: ErrorRow) -> str:
    if error.source.endswith(FOLDER_SUFFIX) and error.uri:  # a class folder's row: its image file
        return error.source + error.uri
    where = f"{posixpath.basename(error.source)} line {error.line}"
    return f"{error.uri} ({where})" if error.uri else where


def _hint(reason: str, example: ErrorRow) -> str:
    if reason == "lookup: file not found" and "\\" in example.uri:
        return (f"backslashes (\\) are not path separators here: write the manifest's paths with '/' "
                f"({example.uri.replace(chr(92), '/')[:100]})")
    if reason == "lookup: file not found" and _looks_swapped(example.uri, example.label):
        return (f"the image URI column holds {example.uri[:60]!r} and the label column {example.label[:100]!r}: "
                "the columns look swapped; a CSV without a header is read as split,image_uri,label (or "
                "image_uri,label): reorder them, or add a header row and pass --uri_column/--label_column")
    if reason == "lookup: file not found":
        return (f"relative image paths are resolved against the manifest's folder "
                f"({posixpath.dirname(example.source)}); if they are "
                "relative to another folder, move the manifest there or use --path_map OLD=NEW")
    if reason.startswith("manifest: unknown split value"):
        return ("the split is read from the first column (or the header's --split_column); if the header names "
                "the columns differently, use --split_column, --uri_column and --label_column")
    if reason == "manifest: wrong number of columns" and "(as in the header)" in example.detail:
        return (f"the header names the columns, and line {example.line} has another number of fields: a field "
                "holding the delimiter without quotes, a missing field, or a line cut short (a manifest copied "
                "while it was still being written ends in half a line: is it the file's last?)")
    delimiter = _other_delimiter(example.detail) if reason == "manifest: wrong number of columns" else None
    if delimiter is not None:
        shown = {"\t": "tab"}.get(delimiter, repr(delimiter))
        return (f"the line is one field holding {shown} and no comma: a manifest is comma-separated (CSV) or JSON "
                f"Lines; save it with commas, e.g. python -c \"import csv,sys; csv.writer(sys.stdout).writerows("
                f"csv.reader(sys.stdin, delimiter={delimiter!r}))\" < IN > OUT.csv")
    if reason == "manifest: wrong number of columns":
        return ("a CSV without a header is read as split,image_uri,label (or image_uri,label); add a header "
                "line naming the columns, or map yours with --uri_column, --label_column and --split_column")
    return ""


OTHER_DELIMITERS = (";", "\t", "|")  # what spreadsheets and databases export instead of commas


def _other_delimiter(detail: str) -> str | None:
    """The delimiter a line read as a single field holds instead of commas (its text follows `line: ` in the
    error's detail), or None."""
    if not detail.startswith("got 1,") or "line: " not in detail:
        return None
    line = detail.split("line: ", 1)[1]
    return next((d for d in OTHER_DELIMITERS if d in line and "," not in line), None)


def _looks_swapped(uri: str, label: str) -> bool:
    return not looks_like_image_path(uri) and looks_like_image_path(label)


@dataclass
class ReasonTally:
    """Failed lines counted per reason (`stage: reason`), with each reason's first line by ErrorRow.sort_key (the
    earliest given wins a tie): memory bounded by the number of distinct reasons, never by the number of rows."""

    counts: Counter[str] = field(default_factory=Counter)
    first: dict[str, ErrorRow] = field(default_factory=dict)

    @classmethod
    def of(cls, errors: Iterable[ErrorRow], ignore_stage: str = "") -> ReasonTally:
        """The tally of `errors`, rows of `ignore_stage` (dropped on purpose) left out."""
        tally = cls()
        for error in errors:
            if error.stage != ignore_stage:
                tally.add(error)
        return tally

    def add(self, error: ErrorRow) -> None:
        reason = reason_key(error.stage, error.reason)
        self.counts[reason] += 1
        known = self.first.get(reason)
        if known is None or error.sort_key() < known.sort_key():
            self.first[reason] = error

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def explain(errors: Sequence[ErrorRow], ignore_stage: str = "") -> str:
    """The most common reasons among `errors` (one per manifest line; rows of `ignore_stage`, dropped on purpose,
    left out) as `N × stage: reason (detail), e.g. EXAMPLE`, joined by "; ", then a hint when one reason
    dominates. Empty when nothing failed."""
    tally = ReasonTally.of(errors, ignore_stage)
    return explain_counts(tally.counts, tally.first)


def explain_counts(counts: Mapping[str, int], first: Mapping[str, ErrorRow]) -> str:
    """`explain` from what a combiner keeps instead of every row: the failed lines' count per reason and each
    reason's first line (by ErrorRow.sort_key). The same text as `explain` of those rows."""
    if not counts:
        return ""
    # Reasons in the order of their first line, as `explain` meets them: ties in count go to the earliest.
    ordered = Counter({reason: counts[reason] for reason in sorted(counts, key=lambda r: first[r].sort_key())})
    parts = []
    for reason, count in sorted(ordered.items(), key=lambda item: (-item[1], item[0]))[:MAX_REASONS_SHOWN]:
        example = first[reason]
        detail = f" ({example.detail[:MAX_DETAIL_CHARS]})" if example.detail else ""
        parts.append(f"{count} × {reason}{detail}, e.g. {_example(example)}")
    text = "; ".join(parts)
    top, top_count = ordered.most_common(1)[0]
    hint = _hint(top, first[top]) if top_count >= DOMINANT_SHARE * sum(ordered.values()) else ""
    return text + (f". Hint: {hint}" if hint else "")


def error_row(fields: object) -> ErrorRow:
    """One errors.jsonl line's object as an ErrorRow (fields a later version added are ignored). Raises ValueError
    on anything that is not an error row."""
    if not isinstance(fields, dict):
        raise ValueError(f"not an errors.jsonl line: {str(fields)[:80]}")
    known = {f.name for f in dataclasses.fields(ErrorRow)}
    try:
        return ErrorRow(**{k: v for k, v in fields.items() if k in known})
    except TypeError as e:
        raise ValueError(f"not an errors.jsonl line: {e}") from None


def error_rows(errors_jsonl: bytes) -> list[ErrorRow]:
    """errors.jsonl's lines as ErrorRows (`error_row` of each). Raises ValueError on a line that is not an error
    row."""
    return [error_row(fields) for fields in parse_errors(errors_jsonl)]


def reason_table(tally: ReasonTally, indent: str = "    ") -> list[str]:
    """Every reason as `   COUNT  stage: reason`, most common first (ties by reason), each with its first line's
    example and detail on the next line; then the hint, if one reason dominates. Empty when nothing failed."""
    if not tally.counts:
        return []
    ranked = sorted(tally.counts.items(), key=lambda item: (-item[1], item[0]))
    lines = []
    for reason, count in ranked:
        example = tally.first[reason]
        detail = f": {example.detail[:MAX_DETAIL_CHARS]}" if example.detail else ""
        lines += [f"{indent}{count:>6}  {reason}", f"{indent}        e.g. {_example(example)}{detail}"]
    top, top_count = ranked[0]
    fix = _hint(top, tally.first[top]) if top_count >= DOMINANT_SHARE * tally.total else ""
    return lines + ([f"{indent}hint: {fix}"] if fix else [])
