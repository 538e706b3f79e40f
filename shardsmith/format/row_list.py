"""A shard's row list (`rows/<shard file>.jsonl` in the build's folder, written with `--incremental`): one line per
record of the shard, in record order,

    ["<row identity>", <manifest lines>, "<label>", <source bytes>, "<uri>"]\\n

a JSON array: the row's identity (shardsmith/core/row_identity.py), how many manifest lines its record stands
for (one, or a detection image's box lines), the label its shard's `label_counts` counted it under (the one
placement stratified by), the size of its image file as placement saw it, and its URI as the manifest wrote it.
Line i describes record i, so a later build knows which records to keep when it rewrites the shard without
removed rows, what the rewritten shard's counts are, and where placement would put each record (compaction),
without parsing a record.

Guarantee: `row_list_bytes` and `parse_row_list` are inverse; the bytes depend only on the entries.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass


class RowListError(ValueError):
    """A row list that is not one: the message names the file and the line."""


@dataclass(frozen=True)
class ListedRow:
    """One record's row: its identity, the manifest lines it stands for, the label it is counted under, its
    image file's size and its URI as written."""

    identity: str
    lines: int
    label: str
    size: int
    uri: str

    def line(self) -> str:
        return json.dumps([self.identity, self.lines, self.label, self.size, self.uri], ensure_ascii=False) + "\n"


def row_list_bytes(rows: Iterable[ListedRow]) -> bytes:
    return "".join(row.line() for row in rows).encode("utf-8")


def parse_row_list(data: bytes, path: str) -> list[ListedRow]:
    """The rows listed in a row list's bytes, in record order; RowListError naming `path` and the line for one
    that is not `[identity, lines, label, size, uri]`."""
    rows = []
    for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), start=1):
        try:
            identity, lines, label, size, uri = json.loads(line)
            if not (isinstance(identity, str) and isinstance(lines, int) and isinstance(label, str)
                    and isinstance(size, int) and isinstance(uri, str)):
                raise ValueError
        except (ValueError, TypeError):
            raise RowListError(f"{path} line {number} is not [identity, lines, label, size, uri]: {line[:80]!r}"
                               ) from None
        rows.append(ListedRow(identity, lines, label, size, uri))
    return rows
