"""The checks of the dataset's folder, once every shard is read: the totals per split and overall against
metadata.json's, shard file names by the template, no shard or index file in the folder that metadata.json does
not list, the build's own copy of metadata.json the published one, labels.txt and errors.jsonl agreeing with it,
and so do the TFDS files when present. `load_metadata` reads metadata.json, or says in one line why the folder
holds no finished dataset."""

from __future__ import annotations

import fnmatch
import json
from collections import Counter

from shardsmith import storage
from shardsmith.errors import UsageError
from shardsmith.format.metadata import parse_labels, read_metadata
from shardsmith.format.metadata_schema import Metadata, MetadataError
from shardsmith.format.naming import (
    ERRORS_FILE,
    INDEX_SUFFIX,
    LABELS_FILE,
    METADATA_FILE,
    is_shard_file_of,
    join,
    shard_file_name,
    shard_file_pattern,
)
from shardsmith.output_folder import dataset_dir, open_version, own_copy
from shardsmith.read.dataset_checks.report import Problem, ShardCheck


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
        metadata = open_version(output_dir).metadata
    except FileNotFoundError:
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


def check_folder(output_dir: str, metadata: Metadata, shards: list[ShardCheck]) -> list[Problem]:
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
