"""Rows that failed in the published version and fail again: what an `--incremental` night does not count
against `--max_error_fraction`.

A manifest row that failed never became a record, so every night reads it again (its image may have been fixed:
then it becomes a record like any new row). One that still fails is listed in the night's errors.jsonl as before,
but it is not a new failure: the version it was built on failed it already, and an export with a few broken rows
would otherwise fail every later night. The budget judges the rows that are new since the published version.

A failed line's *failure key* is what the row said: its URI as written, its split and its label (never its place
in the manifest, so reordered or appended manifests change nothing; a manifest line that could not be parsed has
no URI and is keyed by its split and label as read, usually empty). Keys pair as multisets: three lines of one key
that failed before and five that fail now are three failed again and two new failures. Rows dropped on purpose
(`--on_duplicate drop`'s stage, which the caller names) are not failures and are left out on both sides.

Memory: one 16-byte key (and its count) per line of the published version's errors.jsonl; the night's errors.jsonl
is streamed line by line. A published errors.jsonl that is missing or has a line that is not an error row counts
those lines as unknown: their rows' failures count as new (the safe side: the night fails loudly, never quietly).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterator

from shardsmith.format.metadata import stream_errors
from shardsmith.rows import ErrorRow
from shardsmith.rows.failures import error_row

KEY_BYTES = 16


def failure_key(uri: str, split: str, label: str) -> bytes:
    """A failed line's key (see the module): the same row gives the same key in any process."""
    text = json.dumps([uri, split, label], ensure_ascii=False, separators=(",", ":"))
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=KEY_BYTES,
                           person=b"shardsmith-fail").digest()


def error_key(error: ErrorRow) -> bytes:
    return failure_key(error.uri, error.split, error.label)


def _failed_lines(path: str, dropped_stage: str) -> Iterator[bytes]:
    """The failure keys of an errors.jsonl's lines, streamed, but those of `dropped_stage` (rows dropped on
    purpose); lines that are not error rows are skipped."""
    for fields in stream_errors(path):
        try:
            error = error_row(fields)
        except ValueError:
            continue
        if isinstance(error.uri, str) and isinstance(error.split, str) and isinstance(error.label, str) \
                and error.stage != dropped_stage:
            yield error_key(error)


def count_failed_again(published_errors: str, night_errors: str, dropped_stage: str) -> int:
    """How many failed lines of the errors.jsonl at `night_errors` failed in the one at `published_errors` too,
    pairing keys as multisets (see the module); lines of `dropped_stage` (--on_duplicate drop's) are not
    failures on either side."""
    before = Counter(_failed_lines(published_errors, dropped_stage))
    if not before:
        return 0
    again = 0
    for key in _failed_lines(night_errors, dropped_stage):
        if before[key] > 0:
            before[key] -= 1
            again += 1
    return again


def _failure_lines(path: str) -> Counter:
    """What each line of an errors.jsonl says of its row, but where the row was (line, source): key, stage,
    reason, detail, hashed to KEY_BYTES. Lines that are not error rows count as themselves, so they never match a
    real row."""
    said: Counter = Counter()
    for fields in stream_errors(path):
        try:
            error = error_row(fields)
            what = [error.uri, error.split, error.label, error.stage, error.reason, error.detail]
        except ValueError:
            what = ["not an error row", fields]
        text = json.dumps(what, ensure_ascii=False, sort_keys=True, default=str)
        said[hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=KEY_BYTES).digest()] += 1
    return said


def same_failures(published_errors: str, night_errors: str) -> bool:
    """Whether the night's errors.jsonl lists the same rows failing the same way as the published one (as a
    multiset; their lines may have moved): a night that adds no record and removes none publishes nothing only
    then, so a version's errors.jsonl always accounts for every row of the manifest it stands for. Memory: a
    KEY_BYTES key per distinct error line of the two files."""
    return _failure_lines(published_errors) == _failure_lines(night_errors)
