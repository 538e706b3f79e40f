"""`shardsmith verify D`: reads every record of every shard back and checks it against metadata.json.

Per shard file (in a thread pool, one shard per thread): the file exists and has the size metadata.json gives;
every record's framing holds (length, length CRC, data, data CRC; masked CRC32C, as TFRecord writes it), read as
a stream, and decompressed as a stream for .gz shards; every record parses as a `tf.train.Example` holding
exactly the keys of metadata.json's "features", one value each; the label id names the label text it carries;
`image/key/sha256` is the SHA-256 of `image/encoded`; `image/format` matches the bytes' signature; and every
image (or, with `sample`, a deterministic sample spread evenly over all shards) decodes with
`tf.io.decode_image(..., expand_animations=False)` to exactly (height, width, channels). Then the counts: records
and label counts per shard, per split and in total, against metadata.json; each shard file's checksum (CRC32C, or
SHA-256 for builds that recorded it, computed from the bytes as they are read, compressed for .gz) and its first
record's image/key/sha256 against the shard's `crc32c` (or `sha256`) and `first_key` (absent from builds made
before they were recorded: a note, not a problem), and its
index file (`<shard>.idx`, when metadata.json lists one or one lies beside it) against the records read. Then the
folder: shard file names follow the template, no shard file lies there that metadata.json does not list,
labels.txt and errors.jsonl agree with it, and so do the TFDS files when present.

Memory: each thread holds one record (plus a 1 MiB read buffer); never a shard. Threads are enough to use all
cores: SHA-256, CRC32C, file reads and TensorFlow's image decoders release the GIL, and they are the cost.
Files are read through shardsmith.storage, so local folders and gs:// both work.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import time
import zlib
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from shardsmith import storage
from shardsmith.core.load_images import JPEG_START
from shardsmith.core.progress_signal import ITEMS_DONE, Tally, set_total
from shardsmith.core.rows import placing_label_id
from shardsmith.errors import UsageError
from shardsmith.format.build_folder import dataset_dir, own_copy, shard_file_path
from shardsmith.format.example import (
    BOX_KEYS,
    BOX_LABEL,
    BOX_LABEL_TEXT,
    CHANNELS,
    FORMAT,
    HEIGHT,
    IMAGE,
    LABEL,
    LABEL_TEXT,
    MASK,
    NUM_BYTES,
    SHA256,
    URI,
    WIDTH,
    parse_example,
)
from shardsmith.format.file_checksum import ShardChecksum
from shardsmith.format.metadata import parse_labels, read_metadata
from shardsmith.format.metadata_schema import Metadata, MetadataError, MetadataMissing, ShardEntry
from shardsmith.format.naming import (
    ERRORS_FILE,
    INDEX_SUFFIX,
    LABELS_FILE,
    METADATA_FILE,
    index_file_name,
    is_shard_file_of,
    join,
    shard_file_name,
    shard_file_pattern,
)
from shardsmith.format.record_file import FramingError, record_file
from shardsmith.format.record_index import IndexFileError, RecordIndex
from shardsmith.printable import shown
from shardsmith.read.record_stream import HashingReader, decompressed, open_raw
from shardsmith.read.version_files import version_folder
from shardsmith.read.versions import add_version_argument

MAX_PROBLEMS_PER_SHARD = 50  # listed; the rest are counted
_SIGNATURES = {"jpeg": (JPEG_START,), "png": (b"\x89PNG\r\n\x1a\n",), "gif": (b"GIF87a", b"GIF89a"),
               "bmp": (b"BM",), "webp": (b"RIFF",)}


@dataclass(frozen=True)
class Problem:
    where: str  # a file name, or "metadata.json"
    reason: str
    detail: str = ""
    record: int | None = None  # 0-based record index inside the shard

    def line(self) -> str:
        at = f" record {self.record}" if self.record is not None else ""
        return f"{self.where}{at}: {self.reason}" + (f" ({self.detail})" if self.detail else "")


@dataclass
class ShardCheck:
    file: str
    split: str
    num_records: int = 0
    num_bytes: int = 0  # size of the file on disk (-1: missing)
    num_decoded: int = 0
    problems: list[Problem] = field(default_factory=list)
    num_problems: int = 0
    label_counts: Counter = field(default_factory=Counter)
    sha256_checked: bool = True  # False: metadata.json records no checksum for it (built before they were)

    def add(self, reason: str, detail: str = "", record: int | None = None) -> None:
        self.num_problems += 1
        if len(self.problems) < MAX_PROBLEMS_PER_SHARD:
            self.problems.append(Problem(self.file, reason, detail, record))


@dataclass
class VerifyReport:
    output_dir: str
    shards: list[ShardCheck]
    problems: list[Problem]  # dataset-level ones; shard ones are in `shards`
    expected_records: int
    elapsed_s: float

    @property
    def all_problems(self) -> list[Problem]:
        return self.problems + [p for s in self.shards for p in s.problems]

    @property
    def num_problems(self) -> int:
        return len(self.problems) + sum(s.num_problems for s in self.shards)

    @property
    def ok(self) -> bool:
        return self.num_problems == 0

    @property
    def num_unhashed(self) -> int:
        """Shards whose file hash metadata.json does not record (builds made before it did)."""
        return sum(1 for s in self.shards if not s.sha256_checked)

    def unhashed_note(self) -> str:
        if not self.num_unhashed:
            return ""
        return (f"note: {self.num_unhashed} shards have no checksum in metadata.json (built before shardsmith "
                "recorded them): each record was checked, but not the file as a whole, so a shard swapped in "
                "from another build with the same counts would pass")

    def by_reason(self) -> Counter:
        counts = Counter(p.reason for p in self.problems)
        for s in self.shards:
            counts.update(p.reason for p in s.problems)
            counts["(more, not listed)"] += s.num_problems - len(s.problems)
        return +counts

    def verdict(self) -> str:
        records = sum(s.num_records for s in self.shards)
        decoded = sum(s.num_decoded for s in self.shards)
        size = sum(max(s.num_bytes, 0) for s in self.shards)
        speed = f"{records / self.elapsed_s:.0f} records/s" if self.elapsed_s > 0 else ""
        counts = (f"{records} of {self.expected_records} records in {len(self.shards)} shards, {size / 1e6:.1f} MB, "
                  f"{decoded} images decoded, in {self.elapsed_s:.1f} s ({speed})")
        if self.ok:
            unhashed = f" but the file hash of {self.num_unhashed} shards (not recorded)" if self.num_unhashed else ""
            return f"shardsmith verify: OK: {counts}; every check holds{unhashed}"
        bad = sum(1 for s in self.shards if s.num_problems)
        reasons = ", ".join(f"{reason} {n}" for reason, n in self.by_reason().most_common(3))
        return (f"shardsmith verify: FAILED: {self.num_problems} problems ({reasons}) in {bad} of "
                f"{len(self.shards)} shards and {len(self.problems)} dataset-level; {counts}")


def _decode_indices(metadata: Metadata, sample: int | None) -> dict[str, set[int]] | None:
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


def _check_example(check: ShardCheck, index: int, data: bytes, metadata: Metadata, decode: bool) -> str | None:
    """Checks one serialized record; returns its label text (None when it cannot be told)."""
    import tensorflow as tf

    try:
        example = tf.train.Example.FromString(data)
    except Exception as e:
        check.add("record is not a tf.train.Example", f"{type(e).__name__}", index)
        return None
    feature = example.features.feature
    expected = metadata.features
    present, required = set(feature.keys()), {k for k, kind in expected.items() if not kind.endswith("_list")}
    if not required <= present <= set(expected):  # an empty list feature is left out of a record
        missing, extra = sorted(required - present), sorted(present - set(expected))
        check.add("Example keys differ from metadata.json", f"missing {missing}, unexpected {extra}", index)
        return None
    values = {}
    for key, kind in expected.items():
        scalar = kind.removesuffix("_list")
        listed = list(getattr(feature[key], _LIST_FIELDS[scalar]).value) if key in present else []
        if scalar == kind and len(listed) != 1:
            check.add(f"feature {key} does not hold exactly one {kind} value", f"{len(listed)} values", index)
            return None
        values[key] = listed if scalar != kind else listed[0]
    text = _check_labels(check, index, values, metadata)
    encoded = values[IMAGE] if IMAGE in values else _image_at(values, check, index)
    if encoded is None:
        return text
    if hashlib.sha256(encoded).hexdigest().encode() != values[SHA256]:
        check.add(f"{SHA256} does not match the image bytes", "", index)
    fmt = values[FORMAT].decode("utf-8", "replace")
    signatures = _SIGNATURES.get(fmt)
    if signatures is None or not encoded.startswith(signatures) or (fmt == "webp" and encoded[8:12] != b"WEBP"):
        check.add(f"{FORMAT} does not match the image bytes", f"format {fmt!r}, bytes start {encoded[:4]!r}",
                  index)
    shape = (values[HEIGHT], values[WIDTH], values[CHANNELS])
    if decode:
        try:
            decoded = tf.io.decode_image(encoded, expand_animations=False)
            got = tuple(int(d) for d in decoded.shape)
        except Exception as e:
            check.add("image does not decode", f"{type(e).__name__}: {str(e).splitlines()[0][:200]}", index)
        else:
            check.num_decoded += 1
            if got != shape:
                check.add("decoded shape differs from height/width/channels", f"decoded {got}, recorded {shape}",
                          index)
        if MASK in values:
            try:
                mask_shape = tuple(int(d) for d in tf.io.decode_png(values[MASK], channels=0).shape)
            except Exception as e:
                check.add("segmentation mask does not decode", f"{type(e).__name__}", index)
            else:
                if mask_shape != shape[:2] + (1,):
                    check.add("segmentation mask shape differs from the image", f"mask {mask_shape}, image {shape}",
                              index)
    return text


def _check_labels(check: ShardCheck, index: int, values: dict, metadata: Metadata) -> str | None:
    """Checks that label ids name the label texts they travel with (and that boxes are normalized); returns
    the label the record was placed by: its only label, or the rarest of several (as the build chose)."""
    labels = metadata.labels
    boxes = BOX_LABEL in values
    ids, texts = (values[BOX_LABEL], values[BOX_LABEL_TEXT]) if boxes else (values[LABEL], values[LABEL_TEXT])
    ids, texts = (ids, texts) if isinstance(ids, list) else ([ids], [texts])
    texts = [t.decode("utf-8", "replace") for t in texts]
    if len(ids) != len(texts) or not ids:
        check.add("label ids and label texts differ in number", f"{len(ids)} ids, {len(texts)} texts", index)
        return None
    for label, text in zip(ids, texts, strict=True):
        if not 0 <= label < len(labels) or labels[label] != text:
            check.add("label id and label text disagree", f"id {label}, text {text!r}", index)
            return None
    if boxes:
        corners = [values[key] for key in BOX_KEYS]  # xmin, ymin, xmax, ymax lists
        if any(len(coordinates) != len(ids) for coordinates in corners):
            check.add("box coordinates and box labels differ in number", f"{len(ids)} labels", index)
        elif any(not (0 <= x0 < x1 <= 1 and 0 <= y0 < y1 <= 1) for x0, y0, x1, y1 in zip(*corners, strict=True)):
            check.add("box outside [0, 1] or with min >= max", "", index)
    return labels[placing_label_id(ids, metadata.label_image_counts)]


_LIST_FIELDS = {"bytes": "bytes_list", "int64": "int64_list", "float": "float_list"}


def _image_at(values: dict, check: ShardCheck, index: int) -> bytes | None:
    """--image_mode path: the bytes at the record's image/uri, which must still be the ones it was built from."""
    from shardsmith.core.load_images import read_input_file

    uri = values[URI].decode("utf-8", "replace")
    try:
        data = read_input_file(uri, 1 << 62)
    except Exception as e:
        check.add(f"{URI} cannot be read", f"{uri}: {type(e).__name__}", index)
        return None
    if len(data) != values[NUM_BYTES]:
        check.add(f"the file at {URI} changed since the build", f"{uri}: {len(data)} bytes, recorded "
                  f"{values[NUM_BYTES]}", index)
    return data


def _file_size(path: str) -> int:
    try:
        return storage.size(path)
    except Exception:
        return -1


def _check_shard(output_dir: str, split: str, shard: ShardEntry, metadata: Metadata,
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
                    text = _check_example(check, index, data, metadata, decode is None or index in decode)
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
        return  # _check_example reports a record that does not parse
    if key != expected:
        check.add(f"first record's {SHA256} differs from metadata.json's first_key",
                  f"{key[:16]}..., metadata {expected[:16]}...", 0)


def _read_text(path: str) -> str | None:
    """A side file's text, or None when it is missing or unreadable (verify reports either as a problem)."""
    try:
        data = storage.read_bytes(path)
        return None if data is None else data.decode("utf-8")
    except Exception:
        return None


def load_metadata(output_dir: str) -> Metadata:
    """metadata.json, or UsageError when the folder holds no finished dataset (or it cannot be parsed)."""
    output_dir = output_dir.rstrip("/")
    try:
        metadata = read_metadata(output_dir, readable=True)
    except MetadataMissing:
        if not storage.exists(output_dir):
            raise UsageError(f"{output_dir} does not exist: not a finished shardsmith dataset") from None
        from shardsmith.read.unfinished import unfinished_build

        raise UsageError(unfinished_build(output_dir)
                         or f"{output_dir} holds no metadata.json: not a finished shardsmith dataset") from None
    except MetadataError as e:
        raise UsageError(str(e)) from None
    try:
        dataset_dir(output_dir, metadata)
    except ValueError as e:
        raise UsageError(f"{join(output_dir, METADATA_FILE)}: {e}") from None
    return metadata


def _check_dataset(output_dir: str, metadata: Metadata, shards: list[ShardCheck]) -> list[Problem]:
    """Checks that need every shard's result, or only the folder: totals, names, listed files, side files."""
    from shardsmith.format.tfds import DATASET_INFO_FILE, tfds_metadata_files

    problems: list[Problem] = []
    meta = METADATA_FILE
    compression = metadata.compression_or_default
    by_split: dict[str, list[ShardCheck]] = {}
    for s in shards:
        by_split.setdefault(s.split, []).append(s)
    listed = set()
    total = 0
    for split, info in metadata.splits.items():
        entries = info.shards
        if info.num_shards != len(entries):
            problems.append(Problem(meta, f"{split}: num_shards differs from the shards listed",
                                    f"{info.num_shards} vs {len(entries)}"))
        for index, entry in enumerate(entries):
            if entry.build is None:
                listed.add(entry.file)
            if metadata.incremental is not None:  # generations: each numbered within its own
                if not is_shard_file_of(entry.file, metadata.name, split):
                    problems.append(Problem(meta, f"{split}: shard {index} is not named by the template",
                                            repr(entry.file)))
                continue
            want = shard_file_name(metadata.name, split, index, len(entries), compression)
            if entry.file != want:
                problems.append(Problem(meta, f"{split}: shard {index} is not named by the template",
                                        f"{entry.file!r}, expected {want!r}"))
        for key in ("num_examples", "num_bytes"):
            summed = sum(getattr(e, key) for e in entries)
            if getattr(info, key) != summed:
                problems.append(Problem(meta, f"{split}: {key} differs from the sum over its shards",
                                        f"{getattr(info, key)} vs {summed}"))
        labels = Counter()
        for e in entries:
            labels.update(e.label_counts)
        if {k: v for k, v in info.label_counts.items() if v} != dict(+labels):
            problems.append(Problem(meta, f"{split}: label_counts differ from the sum over its shards"))
        read = sum(s.num_records for s in by_split.get(split, []))
        if read != info.num_examples:
            problems.append(Problem(meta, f"{split}: records read differ from num_examples",
                                    f"{read} read, metadata {info.num_examples}"))
        total += info.num_examples or 0
    if metadata.num_examples != total:
        problems.append(Problem(meta, "num_examples differs from the sum over splits",
                                f"{metadata.num_examples} vs {total}"))
    # detection: several box lines per record
    in_records = total if metadata.num_example_rows is None else metadata.num_example_rows
    if metadata.num_input_rows is not None and metadata.num_input_rows != in_records + metadata.error_count:
        problems.append(Problem(meta, "num_input_rows is not rows in records + errors",
                                f"{metadata.num_input_rows} vs {in_records} + {metadata.num_errors}"))
    if metadata.is_published:
        try:
            own = read_metadata(output_dir)
        except MetadataError:
            own = None
        if own != own_copy(metadata):
            problems.append(Problem(METADATA_FILE, "the build's own copy differs from the published one"))
    for base in storage.list_files(output_dir):
        if "/" in base or not fnmatch.fnmatchcase(base, shard_file_pattern()):
            continue
        if base.endswith(INDEX_SUFFIX) and base.removesuffix(INDEX_SUFFIX) not in listed:
            problems.append(Problem(base, "index file in the folder belongs to no shard listed in metadata.json"))
        elif not base.endswith(INDEX_SUFFIX) and base not in listed:
            problems.append(Problem(base, "shard file in the folder is not listed in metadata.json"))
    labels_txt = _read_text(join(output_dir, LABELS_FILE))
    if labels_txt is None:
        problems.append(Problem(LABELS_FILE, "missing"))
    elif parse_labels(labels_txt.encode("utf-8")) != metadata.labels:
        problems.append(Problem(LABELS_FILE, "differs from metadata.json's labels"))
    errors_text = _read_text(join(output_dir, ERRORS_FILE))
    if errors_text is None:
        problems.append(Problem(ERRORS_FILE, "missing"))
    else:
        lines = [line for line in errors_text.split("\n") if line.strip()]
        if metadata.num_errors is not None and len(lines) != metadata.num_errors:
            problems.append(Problem(ERRORS_FILE, "line count differs from num_errors",
                                    f"{len(lines)} lines, metadata {metadata.num_errors}"))
    tfds_files = tfds_metadata_files(metadata)
    for name, content in tfds_files.items():
        present = _read_text(join(output_dir, name))
        if present is None:
            continue  # datasets built before TFDS support have none; not a defect
        same = (json.loads(present) == json.loads(content) if name.endswith(".json")
                else present == content.decode("utf-8"))
        if not same:
            problems.append(Problem(name, "disagrees with metadata.json (TFDS would read other shards or counts)"))
    if tfds_files and DATASET_INFO_FILE not in tfds_files and _read_text(join(output_dir, DATASET_INFO_FILE)):
        problems.append(Problem(DATASET_INFO_FILE, "describes this folder alone, but the version's shards lie in "
                                "several (TFDS would not find them); read it with shardsmith.tfds_dirs"))
    return problems


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))  # the cores this process may use (containers, taskset)
    except AttributeError:
        return os.cpu_count() or 1


def verify(output_dir: str, sample: int | None = None, workers: int | None = None, progress=None) -> VerifyReport:
    """Checks the dataset in `output_dir`; `progress(ShardCheck)` is called as each shard finishes, in order."""
    metadata = load_metadata(output_dir)
    output_dir = dataset_dir(output_dir.rstrip("/"), metadata)  # the published build's folder
    import tensorflow as tf  # noqa: F401  (imported once here, not by the first threads at once; not timed)

    started = time.monotonic()
    decode = _decode_indices(metadata, sample)
    jobs = metadata.all_shards()
    expected = sum(shard.num_examples for _, shard in jobs)
    set_total(expected)  # for a watching launcher (`shardsmith verify`'s progress line)
    shards: list[ShardCheck] = []
    with ThreadPoolExecutor(max(1, workers or _cores())) as pool:
        futures = [pool.submit(_check_shard, output_dir, split, shard, metadata,
                               None if decode is None else decode.get(shard.file, set()))
                   for split, shard in jobs]
        for future in futures:
            shards.append(future.result())
            if progress:
                progress(shards[-1])
    problems = _check_dataset(output_dir, metadata, shards)
    return VerifyReport(output_dir, shards, problems, expected, time.monotonic() - started)


def shard_line(check: ShardCheck) -> str:
    status = "ok  " if not check.num_problems else "FAIL"
    size = f"{check.num_bytes / 1e6:.2f} MB" if check.num_bytes >= 0 else "missing"
    line = f"  {status}  {check.file:<44} {check.num_records:>7} records  {size:>9}  {check.num_decoded:>7} decoded"
    if check.num_problems:
        line += f"  {check.num_problems} problem(s)"
    return line


def add_arguments(parser) -> None:
    parser.add_argument("output_dir", help="a finished dataset folder (local or gs://)")
    parser.add_argument("--sample", type=int, default=None, metavar="N",
                        help="decode N images, spread evenly over all shards (default: every image); every "
                             "record is still read, checksummed, parsed and hashed")
    parser.add_argument("--workers", type=int, default=None, help="threads (default: one per core)")
    add_version_argument(parser)


def run(args) -> VerifyReport:
    """`shardsmith verify`: prints a line per shard, the problems, and the verdict as the last line."""
    if args.sample is not None and args.sample < 0:
        raise UsageError("--sample must be 0 or more")
    if args.workers is not None and args.workers < 1:
        raise UsageError("--workers must be 1 or more")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    output_dir = version_folder(args.output_dir, args.version)
    load_metadata(output_dir)  # usage errors before anything is printed
    print(f"shardsmith verify {output_dir}", flush=True)
    report = verify(output_dir, args.sample, args.workers, progress=lambda s: print(shard_line(s), flush=True))
    problems = report.all_problems
    if problems:
        print(f"problems ({report.num_problems}):")
        for problem in problems[:100]:
            print(f"  {shown(problem.line())}")
        if report.num_problems > len(problems[:100]):
            print(f"  ... and {report.num_problems - len(problems[:100])} more")
    if report.unhashed_note():
        print(report.unhashed_note())
    print(report.verdict(), flush=True)
    return report


def _short(digest: str) -> str:
    """A checksum as a message shows it: a SHA-256's first 16 digits, a CRC32C's 8."""
    return digest if len(digest) <= 16 else f"{digest[:16]}..."
