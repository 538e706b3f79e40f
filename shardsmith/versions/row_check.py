"""A shard's row list (shardsmith/format/row_list.py) checked against the shard, and rebuilt from it when lost.

Row lists are input: a later build pairs manifest rows with them, and what copies records byte for byte (a shard
rewritten without its removed rows, shardsmith/versions/shard_rewrite.py; compaction,
shardsmith/versions/record_copy.py) places and counts each record by its line. So:

- a row list holds one line per record of its shard: `check_count`, against metadata.json's count, before a
  pairing or a placement uses it;
- each record copied is the one its line describes: `check_record` compares the record's image/filename,
  image/key/sha256 and label texts with the line's URI, SHA-256 (when the line has one) and label, reading only
  those values (`feature_map`: about 6 us a record on a 57 KB photo, a third of a full parse);
- a lost row list is rebuilt from its shard's records (`listed_row`) where a record holds every field of its
  line exactly: a classification record without extra columns, whose row identity is its split, URI and label,
  whose image bytes are the file's (their SHA-256 is image/key/sha256) or, with --image_mode path, whose size is
  image/num_bytes. A record of another task, or with extra columns, does not (a box or a float column is
  stored as float32, a mask's URI not at all): `unrecoverable` says why, and the error says what to do.

Every failure is a RowListError whose message, one line, names the row list, the line and what differs.
"""

from __future__ import annotations

import gzip
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from shardsmith import storage
from shardsmith.format.example import (
    BOX_LABEL_TEXT,
    FILENAME,
    IMAGE,
    LABEL_TEXT,
    NUM_BYTES,
    SHA256,
    feature_map,
    feature_values,
)
from shardsmith.format.record_file import RecordFileFormat
from shardsmith.format.row_list import ListedRow, RowListError
from shardsmith.rows import ManifestRow
from shardsmith.rows.row_identity import row_identity

CHECKED_KEYS = (FILENAME, SHA256, LABEL_TEXT, BOX_LABEL_TEXT)
REBUILD_KEYS = (FILENAME, SHA256, LABEL_TEXT, IMAGE, NUM_BYTES)
REBUILD = "rebuild it in full once with --incremental --overwrite"


def unrecoverable(task: str, features: Any) -> str:
    """Why a lost row list of a version of this task (and --feature columns) cannot be rebuilt exactly from its
    shard's records; "" where it can."""
    if task != "classification":
        return f"a {task} record does not hold its row's identity exactly (boxes are float32, a mask's URI is not kept)"
    if features:
        return "a record's extra columns are not kept exactly as the manifest wrote them (floats are float32)"
    return ""


def fix(why_not: str) -> str:
    """What to do about a row list that does not describe its shard."""
    if why_not:
        return f"restore it as the build wrote it, or {REBUILD}"
    return "restore it as the build wrote it, or delete it (the next build rebuilds it from the shard's records)"


def missing(list_path: str, why_not: str) -> RowListError:
    """The error for a lost row list that cannot be rebuilt."""
    return RowListError(f"{list_path} is missing and cannot be rebuilt from its shard's records ({why_not}): "
                        f"restore it from a copy of the folder, or {REBUILD}")


def check_count(list_path: str, listed: int, shard_file: str, num_records: int, why_not: str) -> None:
    """RowListError unless the row list has a line for each of the shard's records (metadata.json's count)."""
    if listed != num_records:
        raise RowListError(f"{list_path} lists {listed} rows, but metadata.json counts {num_records} records in "
                           f"shard {shard_file}: the row list does not describe its shard; {fix(why_not)}")


def check_record(record: bytes | memoryview, row: ListedRow, list_path: str, position: int, why_not: str) -> str:
    """The record's image SHA-256 (as text; "" for a record without one) once `record` (the shard's record at
    `position`) was found to be the one line `position` of the row list describes; RowListError otherwise. It
    must hold the line's URI, an image SHA-256 that starts with the line's (when listed: all 64 digits, or a
    compaction row's first few, shardsmith/versions/compaction.py SHA256_CHECK_CHARS) and a label of its among
    the line's. Runs for every record copied: the values are compared as protobuf holds them, and decoded only
    to say what differs."""
    feature = feature_map(record)
    uri = feature[FILENAME].bytes_list.value if FILENAME in feature else []
    sha256 = feature[SHA256].bytes_list.value if SHA256 in feature else []
    label_key = LABEL_TEXT if LABEL_TEXT in feature else BOX_LABEL_TEXT
    labels = feature[label_key].bytes_list.value if label_key in feature else []
    listed = row.sha256.encode()
    sha256_agrees = not listed or (len(sha256) == 1 and sha256[0].startswith(listed))
    if uri == [row.uri.encode()] and sha256_agrees and row.label.encode() in labels:
        return _text(sha256)
    differs = []
    if uri != [row.uri.encode()]:
        differs.append(f"uri {row.uri!r}, the record's {_text(uri)!r}")
    if not sha256_agrees:
        differs.append(f"sha256 {row.sha256[:16]}..., the record's {_text(sha256)[:16]}...")
    if row.label.encode() not in labels:
        texts = [label.decode("utf-8", "replace") for label in labels]
        differs.append(f"label {row.label!r}, the record's {', '.join(map(repr, texts)) or 'none'}")
    raise RowListError(f"{list_path} line {position + 1} does not describe record {position} of its shard: it "
                       f"lists {'; '.join(differs)}; {fix(why_not)}")


def listed_row(record: bytes, split: str, list_path: str, position: int) -> ListedRow:
    """The row list line of a classification record without extra columns (see the module), recomputed from the
    record; RowListError when its image bytes were re-encoded (their file's size is not kept)."""
    values = feature_values(record, REBUILD_KEYS)
    uri, sha256 = _text(values.get(FILENAME)), _text(values.get(SHA256))
    labels = [label.decode("utf-8") for label in values.get(LABEL_TEXT, [])]
    if len(labels) != 1:
        raise RowListError(f"{list_path} is missing and record {position} of its shard holds {len(labels)} labels, "
                           f"not one: {REBUILD}")
    if IMAGE in values:
        image = values[IMAGE][0] if values[IMAGE] else b""
        if hashlib.sha256(image).hexdigest() != sha256:
            raise RowListError(f"{list_path} is missing and record {position} of its shard holds a re-encoded "
                               f"image, not its file's bytes (whose size the row list needs): {REBUILD}")
        size = len(image)
    else:
        size = int(values.get(NUM_BYTES, [0])[0])
    identity = row_identity(ManifestRow("", 0, 0, uri, uri, split, labels[0]))
    return ListedRow(identity, 1, labels[0], size, uri, sha256)


def rebuilt_rows(shard_path: str, compression: str, file_format: RecordFileFormat, split: str,
                 list_path: str) -> list[ListedRow]:
    """The lost row list `list_path` of shard `shard_path` (of `split`), rebuilt from its records (the caller
    checked `unrecoverable`). Memory: one record at a time, plus the rows."""
    return [listed_row(record, split, list_path, position)
            for position, record in enumerate(shard_records(shard_path, compression, file_format))]


def shard_records(path: str, compression: str, file_format: RecordFileFormat) -> Iterator[bytes]:
    """A shard's records, in order, both CRCs of each checked."""
    with storage.open_read(path, buffered=True) as raw:
        stream = gzip.GzipFile(fileobj=raw, mode="rb") if compression == "gzip" else raw
        yield from file_format.iter_records(stream)


def _text(values: list | None) -> str:
    return values[0].decode("utf-8", "replace") if values else ""


@dataclass(frozen=True)
class Refused:
    """What a writer process did not do because a shard, its row list or its index file is not what metadata.json
    says (a RowListError, or compaction's SourceRecordError): the error's class and message, raised again by the
    launcher as they are raised where the work is done in the launcher's own process."""

    error: type[Exception]  # pickled by reference: the same class in the launcher
    message: str

    def raise_again(self) -> None:
        raise self.error(self.message)
