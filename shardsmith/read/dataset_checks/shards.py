"""The checks of one shard file, read as a stream (decompressed as a stream for .gz): it exists with the size
metadata.json gives; every record's framing holds (the record file's own: for TFRecord length, length CRC, data,
data CRC); every record passes records.py's checks; records and label counts match metadata.json; the file's
checksum (CRC32C, or SHA-256 for builds that recorded it, computed from the bytes as they are read) and its
first record's image/key/sha256 match the shard's `crc32c` (or `sha256`) and `first_key` (absent from builds
made before they were recorded: a note, not a problem); and its index file (`<shard>.idx`, when metadata.json
lists one or one lies beside it) holds the records read. Which records are decoded: `decode_indices`."""

from __future__ import annotations

import zlib

from shardsmith import storage
from shardsmith.format.example import SHA256, parse_example
from shardsmith.format.file_checksum import ShardChecksum
from shardsmith.format.metadata_schema import Metadata, ShardEntry
from shardsmith.format.naming import index_file_name
from shardsmith.format.record_file import FramingError, record_file
from shardsmith.format.record_index import IndexFileError, RecordIndex
from shardsmith.output_folder import shard_file_path
from shardsmith.progress_signal import ITEMS_DONE, Tally
from shardsmith.read.dataset_checks.records import check_example
from shardsmith.read.dataset_checks.report import ShardCheck
from shardsmith.read.record_stream import HashingReader, decompressed, open_raw


def decode_indices(metadata: Metadata, sample: int | None) -> dict[str, set[int]] | None:
    """Which records to decode, per shard file: None means all. A sample of n gives every non-empty shard one
    record when n is at least the number of shards, and the rest in proportion to shard sizes (largest
    remainder); inside a shard the picks are evenly spaced. No randomness: the same records on every run."""
    if sample is None:
        return None
    shards = [s for _, s in metadata.all_shards()]
    sizes = [max(0, s.num_examples) for s in shards]
    if sample >= sum(sizes):
        return None
    counts = [0] * len(shards)
    filled = [i for i, n in enumerate(sizes) if n]
    if sample < len(filled):
        for k in range(sample):
            counts[filled[k * len(filled) // sample]] = 1
    else:
        for i in filled:
            counts[i] = 1
        room = [n - c for n, c in zip(sizes, counts, strict=True)]
        left, total_room = sample - len(filled), sum(room)
        quotas = [left * r / total_room if total_room else 0.0 for r in room]
        extra = [int(q) for q in quotas]
        order = sorted(range(len(shards)), key=lambda i: (-(quotas[i] - extra[i]), i))
        for i in order[: left - sum(extra)]:
            extra[i] += 1
        counts = [c + e for c, e in zip(counts, extra, strict=True)]
    return {s.file: {int((k + 0.5) * n / c) for k in range(c)} if c else set()
            for s, n, c in zip(shards, sizes, counts, strict=True)}


def _file_size(path: str) -> int:
    try:
        return storage.size(path)
    except Exception:
        return -1


def check_shard(output_dir: str, split: str, shard: ShardEntry, metadata: Metadata,
                 decode: set[int] | None) -> ShardCheck:
    name = shard.file
    check = ShardCheck(name, split)
    if "/" in name or name in ("", ".", ".."):
        check.add("shard file name is not a plain file name", repr(name))
        return check
    try:
        path = shard_file_path(output_dir, shard)
    except ValueError as e:
        check.add("shard file is not in the dataset's folder", str(e))
        return check
    check.num_bytes = _file_size(path)
    if check.num_bytes < 0:
        check.add("shard file is missing")
        return check
    if check.num_bytes != shard.num_bytes:
        check.add("file size differs from metadata.json", f"{check.num_bytes} bytes, metadata {shard.num_bytes}")
    compression, file_format = metadata.compression_or_default, record_file(metadata.format)
    checksum = ShardChecksum.of(shard)
    file_checksum = None
    record_index: RecordIndex | None = RecordIndex()  # None once the records cannot be read to the end
    checked = Tally(ITEMS_DONE)
    try:
        with HashingReader(open_raw(path), checksum.hasher() if checksum is not None else None) as raw:
            try:
                for index, data in enumerate(file_format.iter_records(decompressed(raw, compression))):
                    check.num_records += 1
                    checked.add()
                    record_index.add(len(data))
                    if index == 0:
                        _check_first_key(check, data, shard)
                    text = check_example(check, index, data, metadata, decode is None or index in decode)
                    if text is not None:
                        check.label_counts[text] += 1
            except FramingError as e:
                record_index = None
                check.add(e.reason, f"at byte {e.offset}" + (f", {e.detail}" if e.detail else ""),
                          check.num_records)
            file_checksum = raw.rest_hexdigest()
    except (OSError, EOFError, zlib.error) as e:  # gzip: truncated stream, bad CRC, not gzip
        record_index = None
        check.add("shard cannot be read" + (" (gzip)" if compression == "gzip" else ""),
                  f"{type(e).__name__}: {str(e)[:200]}", check.num_records)
    checked.flush()
    if record_index is not None and compression != "gzip" and file_format.indexable:
        _check_index_file(check, index_file_name(path), shard, record_index)
    if checksum is None:
        check.sha256_checked = False
    elif file_checksum is not None and file_checksum != checksum.value:
        check.add(f"file {checksum.name} differs from metadata.json",
                  f"{_short(file_checksum)}, metadata {_short(checksum.value)}: not the file this build wrote")
    if check.num_records != shard.num_examples:
        check.add("record count differs from metadata.json",
                  f"{check.num_records} records, metadata {shard.num_examples}")
    recorded = {k: v for k, v in shard.label_counts.items() if v}
    if dict(+check.label_counts) != recorded and check.num_records == shard.num_examples:
        check.add("label counts differ from metadata.json", f"{dict(sorted(check.label_counts.items()))}, "
                                                            f"metadata {recorded}")
    return check


def _check_index_file(check: ShardCheck, path: str, shard: ShardEntry, records: RecordIndex) -> None:
    """The shard's index file, when metadata.json lists it or one lies beside the shard (`shardsmith index`
    wrote it), holds exactly the offsets and lengths of the records just read."""
    try:
        data = storage.read_bytes(path)
    except OSError as e:
        check.add("index file cannot be read", f"{type(e).__name__}: {str(e)[:200]}")
        return
    if data is None:
        if shard.index is not None:
            check.add("index file listed in metadata.json is missing", shard.index)
        return
    if data == records.to_bytes():
        return
    try:
        found = RecordIndex.parse(data, path.rsplit("/", 1)[-1])
    except IndexFileError as e:
        check.add("index file is not an index", str(e))
        return
    pairs = enumerate(zip(found, records, strict=False))
    differ = next((i for i, (a, b) in pairs if a != b), min(len(found), len(records)))
    check.add("index file differs from the shard's records",
              f"{len(found)} entries for {len(records)} records, first difference at entry {differ}")


def _check_first_key(check: ShardCheck, data: bytes, shard: ShardEntry) -> None:
    """The shard's first record carries the image/key/sha256 metadata.json records as its `first_key`."""
    expected = shard.first_key
    if expected is None:
        return
    try:
        key = parse_example(data).get(SHA256, [b""])[0].decode("utf-8", "replace")
    except Exception:
        return  # check_example reports a record that does not parse
    if key != expected:
        check.add(f"first record's {SHA256} differs from metadata.json's first_key",
                  f"{key[:16]}..., metadata {expected[:16]}...", 0)


def _short(digest: str) -> str:
    """A checksum as a message shows it: a SHA-256's first 16 digits, a CRC32C's 8."""
    return digest if len(digest) <= 16 else f"{digest[:16]}..."
