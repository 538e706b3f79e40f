"""Why rows failed, in one line a person can act on: the most common reasons with their counts and one example
each, and, when one reason accounts for nearly every failure and has a known cause, the fix.

The reason is an ErrorRow's stable grouping key (stage and reason); the example names the row (its URI, or its
manifest and line) and the reason's detail, which carries the row's own values.
"""

from __future__ import annotations

import dataclasses
import posixpath
from collections import Counter
from collections.abc import Sequence

from shardsmith.core.rows import ErrorRow
from shardsmith.format.metadata import parse_errors

MAX_REASONS_SHOWN = 3
MAX_DETAIL_CHARS = 160
# A reason behind at least this share of the failed rows is taken to have one cause, worth a hint.
DOMINANT_SHARE = 0.9


def _example(error: ErrorRow) -> str:
    where = f"{posixpath.basename(error.source)} line {error.line}"
    return f"{error.uri} ({where})" if error.uri else where


def _hint(reason: str, example: ErrorRow) -> str:
    if reason == "lookup: file not found":
        return (f"relative image paths are resolved against the manifest's folder "
                f"({posixpath.dirname(example.source)}); if they are "
                "relative to another folder, move the manifest there or use --path_map OLD=NEW")
    if reason.startswith("manifest: unknown split value"):
        return ("the split is read from the first column (or the header's --split_column); if the header names "
                "the columns differently, use --split_column, --uri_column and --label_column")
    if reason == "manifest: wrong number of columns":
        return ("a CSV without a header is read as split,image_uri,label (or image_uri,label); add a header "
                "line naming the columns, or map yours with --uri_column, --label_column and --split_column")
    return ""


def error_rows(errors_jsonl: bytes) -> list[ErrorRow]:
    """errors.jsonl's lines as ErrorRows (fields a later version added are ignored). Raises ValueError on a line
    that is not an error row."""
    known = {f.name for f in dataclasses.fields(ErrorRow)}
    try:
        return [ErrorRow(**{k: v for k, v in e.items() if k in known}) for e in parse_errors(errors_jsonl)]
    except TypeError as e:
        raise ValueError(f"not an errors.jsonl line: {e}") from None


def _counted(failed: Sequence[ErrorRow]) -> tuple[list[tuple[str, int]], dict[str, ErrorRow]]:
    counts = Counter(f"{e.stage}: {e.reason}" for e in failed)
    first: dict[str, ErrorRow] = {}
    for error in failed:
        first.setdefault(f"{error.stage}: {error.reason}", error)
    return sorted(counts.items(), key=lambda item: (-item[1], item[0])), first


def _with_example(example: ErrorRow) -> str:
    detail = f" ({example.detail[:MAX_DETAIL_CHARS]})" if example.detail else ""
    return f"{detail}, e.g. {_example(example)}"


def reasons(errors: Sequence[ErrorRow], ignore_stage: str = "", shown: int = MAX_REASONS_SHOWN) -> list[str]:
    """The `shown` most common reasons as `N × stage: reason (detail), e.g. EXAMPLE`, most common first."""
    ranked, first = _counted([e for e in errors if e.stage != ignore_stage])
    return [f"{count} × {reason}{_with_example(first[reason])}" for reason, count in ranked[:shown]]


def reason_table(errors: Sequence[ErrorRow], indent: str = "    ") -> list[str]:
    """Every reason as `   COUNT  stage: reason`, most common first; the MAX_REASONS_SHOWN most common with their
    detail and an example on the next line; then the hint, if any. For a build's summary."""
    ranked, first = _counted(errors)
    lines = []
    for rank, (reason, count) in enumerate(ranked):
        lines.append(f"{indent}{count:>6}  {reason}")
        if rank < MAX_REASONS_SHOWN:
            example = first[reason]
            detail = f": {example.detail[:MAX_DETAIL_CHARS]}" if example.detail else ""
            lines.append(f"{indent}        e.g. {_example(example)}{detail}")
    fix = hint(errors)
    return lines + ([f"{indent}hint: {fix}"] if fix else [])


def hint(errors: Sequence[ErrorRow], ignore_stage: str = "") -> str:
    """The fix for the reason behind nearly every failure, when it has a known cause; else empty."""
    failed = [e for e in errors if e.stage != ignore_stage]
    if not failed:
        return ""
    ranked, first = _counted(failed)
    top, top_count = ranked[0]
    return _hint(top, first[top]) if top_count >= DOMINANT_SHARE * len(failed) else ""


def explain(errors: Sequence[ErrorRow], ignore_stage: str = "") -> str:
    """The most common reasons among `errors` (one per manifest line; rows of `ignore_stage`, dropped on purpose,
    left out) as `N × stage: reason (detail), e.g. EXAMPLE`, joined by "; ", then a hint when one reason
    dominates. Empty when nothing failed."""
    text = "; ".join(reasons(errors, ignore_stage))
    fix = hint(errors, ignore_stage)
    return text + (f". Hint: {fix}" if fix else "")
