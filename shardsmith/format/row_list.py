"""A shard's row list (`rows/<shard file>.jsonl` in the build's folder, written by every build): one line per
record of the shard, in record order,

    ["<row identity>", <manifest lines>, "<label>", <source bytes>, "<uri>", "<sha256>"(, "<signature>")]\\n

a JSON array: the row's identity (shardsmith/rows/row_identity.py), how many manifest lines its record stands
for (one, or a detection image's box lines), the label its shard's `label_counts` counted it under (the one
placement stratified by), the size of its image file as placement saw it, its URI as the manifest wrote it, the
SHA-256 of its image file (the record's `image/key/sha256`: later versions' duplicate checks compare new
images with it) and, from a build with --near_duplicates, its image's perceptual signature as text
(shardsmith/near_duplicates/perceptual_hash.py `signature_text`: later nights' near-duplicate searches compare
new images with it). Lists written before the SHA-256 was listed have five fields and parse with `sha256` ""; a line
without a signature (a build without --near_duplicates, a list rebuilt from its shard's records) parses with
`signature` "", and its record is left out of near-duplicate comparisons.
Line i describes record i, so a later build knows which records to keep when it rewrites the shard without
removed rows, what the rewritten shard's counts are, and where placement would put each record (compaction),
without parsing a record.

Guarantee: `row_list_bytes` and `parse_row_list` are inverse; the bytes depend only on the entries. A row list is
input to the builds after the one that wrote it: shardsmith/versions/row_check.py checks it against its shard.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass

# A line's SHA-256 field, as row_list_bytes writes it: the 64 characters after the URI's `", "`, the last field or
# the one before the signature (which holds no quote). No line break inside, and `", "` never occurs in a JSON
# string but at its end, so each line holds at most one match, where its fields put it: a match never takes up
# the next one's bytes. Any 64 characters match (in C, a jump rather than a test of each one): only those equal
# to a wanted hexadecimal SHA-256 are ever looked at.
_SHA256_FIELD = re.compile(rb'", "(.{64})"(?:\]\n|, "[^"\n]*"\]\n)')


class RowListError(ValueError):
    """A row list that is not one: the message names the file and the line."""


@dataclass(frozen=True)
class ListedRow:
    """One record's row: its identity, the manifest lines it stands for, the label it is counted under, its
    image file's size, its URI as written, its image's SHA-256 ("" in a list written before it was listed) and its
    perceptual signature as text ("" when its build did not sign images)."""

    identity: str
    lines: int
    label: str
    size: int
    uri: str
    sha256: str = ""
    signature: str = ""

    def line(self) -> str:
        fields = [self.identity, self.lines, self.label, self.size, self.uri]
        if self.sha256 or self.signature:
            fields.append(self.sha256)
        if self.signature:
            fields.append(self.signature)
        return json.dumps(fields, ensure_ascii=False) + "\n"


def row_list_bytes(rows: Iterable[ListedRow]) -> bytes:
    return "".join(row.line() for row in rows).encode("utf-8")


def parse_row_list(data: bytes, path: str) -> list[ListedRow]:
    """The rows listed in a row list's bytes, in record order; RowListError naming `path` and the line for one
    that is not `[identity, lines, label, size, uri, sha256, signature]` (or the first five or six). The signature
    is checked to be text here, and decoded (and checked) where it is compared."""
    rows = []
    for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), start=1):
        try:
            identity, lines, label, size, uri, *rest = json.loads(line)
            sha256, signature = (*rest, "", "")[:2] if len(rest) <= 2 else (None, None)
            if not (isinstance(identity, str) and isinstance(lines, int) and isinstance(label, str)
                    and isinstance(size, int) and isinstance(uri, str) and isinstance(sha256, str)
                    and isinstance(signature, str)):
                raise ValueError
        except (ValueError, TypeError):
            raise RowListError(f"{path} line {number} is not [identity, lines, label, size, uri, sha256, signature]: "
                               f"{line[:80]!r}") from None
        rows.append(ListedRow(identity, lines, label, size, uri, sha256, signature))
    return rows


def rows_with_sha256(data: bytes, wanted: Collection[str], path: str) -> Iterator[ListedRow]:
    """The rows of a row list's bytes whose image's SHA-256 is one of `wanted`, in record order, each parsed
    (RowListError as `parse_row_list`); the other lines are only scanned for their SHA-256 field, at a fraction
    of the cost of parsing them. Lines without a SHA-256 (lists from before it was listed) are never wanted. Every
    line row_list_bytes writes is found when its SHA-256 is wanted, whatever its other fields hold (a URI that is
    itself 64 hexadecimal digits, quotes, commas)."""
    # One pass in C finds which wanted hashes occur at all (most nights: none); only then are lines visited.
    present = {digest.encode("ascii") for digest in wanted if digest.isascii()}.intersection(
        _SHA256_FIELD.findall(data))
    if not present:
        return
    counted_to, number = 0, 1  # the line number of the line that starts at or after `counted_to`
    for match in _SHA256_FIELD.finditer(data):
        if match.group(1) not in present:
            continue
        start = data.rfind(b"\n", 0, match.start()) + 1
        number += data.count(b"\n", counted_to, start)
        counted_to = start
        try:
            row = parse_row_list(data[start:match.end()], path)[0]
        except RowListError:
            raise RowListError(f"{path} line {number} is not [identity, lines, label, size, uri, sha256, signature]: "
                               f"{data[start:match.end()][:80]!r}") from None
        if row.sha256 in wanted:
            yield row
