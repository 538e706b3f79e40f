"""Every name a dataset uses: its files, its build folders and its splits (paths themselves: shardsmith.storage).

The writer, the report, `load()`, `verify` and `inspect` import these; nothing else spells a file name.
"""

from __future__ import annotations

import re

from shardsmith.format.record_file import RECORD_FILES, TFRECORD, RecordFileFormat

# Defined by the storage module, which writes every file through a temporary name and tells local paths from
# URIs; re-exported because the format's names are built with them.
from shardsmith.storage import TEMP_PREFIX, is_remote, join  # noqa: F401

METADATA_FILE = "metadata.json"
LABELS_FILE = "labels.txt"
ERRORS_FILE = "errors.jsonl"
NEAR_DUPLICATES_FILE = "near_duplicates.jsonl"  # --near_duplicates report|drop: the pairs found
CARD_FILE = "card.html"  # the version's dataset card (shardsmith/card/)
READ_CHECK_FILE = "readcheck.json"  # `shardsmith readcheck`'s figures, shown on the card
BUILDS_DIR = "builds"
BUILD_RECORD = "build.json"
# The files of a build's folder that name the build itself (its id, when it ran, the versions kept then): every
# other file a build writes holds the same bytes for the same inputs and seed.
NAMES_ITS_BUILD = (BUILD_RECORD, CARD_FILE)
# In a build's folder: one empty file per file or folder the build writes there, made before it is written (its
# name is the written path, escaped); cleanup deletes exactly these (shardsmith/format/build_record.py).
WRITTEN_DIR = ".shardsmith-written"
# The top-level metadata.json while it is staged in the build's folder, before the switch that publishes it.
STAGED_METADATA = f"{TEMP_PREFIX}published-{METADATA_FILE}"
LOCK_FILE = ".shardsmith-lock"
BUILD_ID = re.compile(r"\d{8}T\d{6}Z-[0-9a-f]{8}")
# At the top level, beside metadata.json: the names that pin versions against retention (`shardsmith tag`), and
# the versions retention removed, with when (shardsmith/output_folder/tags.py, retired.py).
TAGS_FILE = "tags.json"
RETIRED_FILE = "retired.json"
# A top-level file written whole through a temporary name beside it (storage.write_atomically): a command killed
# between the two leaves that temporary, which only a holder of the folder's lock can have been writing.
TOP_LEVEL_TEMPORARY = re.compile(rf"{re.escape(TEMP_PREFIX)}({re.escape(METADATA_FILE)}|{re.escape(TAGS_FILE)}|"
                                 rf"{re.escape(RETIRED_FILE)})\.[0-9a-f]{{16}}")
# A tag's name: a letter, then letters, digits, ".", "_" or "-" (never a build id, which starts with a digit).
TAG_NAME = re.compile(r"[A-Za-z][A-Za-z0-9._-]{0,63}")
TRANSFORM_DIRS = ("transform_fn", "transformed_metadata")  # tf.transform's outputs, in a build's folder

SPLITS = ("train", "validation", "test")
SPLIT_ALIASES = {
    "train": "train",
    "training": "train",
    "validation": "validation",
    "val": "validation",
    "valid": "validation",
    "eval": "validation",
    "evaluation": "validation",
    "test": "test",
    "testing": "test",
    "unassigned": "",  # AutoML Vision's word for "let the tool choose"
}


def canonical_split(value: str) -> str | None:
    """Maps a split value as written (any case) to train/validation/test ("" for UNASSIGNED: to be chosen);
    None when unknown."""
    return SPLIT_ALIASES.get(value.strip().lower())


# What stands between a shard file's `<name>-<split>` and its numbers, in any record-file format's names.
SHARD_MARKS = "(?:" + "|".join(re.escape(f.shard_mark) for f in RECORD_FILES.values()) + ")"


def shard_file_name(name: str, split: str, shard: int, num_shards: int, compression: str,
                    generation: int = 1, file_format: RecordFileFormat = TFRECORD) -> str:
    """`<name>-<split>.tfrecord-SSSSS-of-NNNNN` (the format's file suffix: shardsmith/format/record_file.py),
    with `.gz` for gzip: TFDS's file template, so TFDS reads it. The shards of a later --incremental generation G
    carry it, `<name>-<split>.tfrecord-gG-SSSSS-of-NNNNN`, so no two shards of a version share a name, whichever
    build's folder holds them."""
    suffix = ".gz" if compression == "gzip" else ""
    tag = f"g{generation}-" if generation > 1 else ""
    return f"{name}-{split}{file_format.shard_mark}{tag}{shard:05d}-of-{num_shards:05d}{suffix}"


def shard_generation(file: str) -> int:
    """The --incremental generation a shard file name carries (1 for a name without one)."""
    found = re.search(rf"{SHARD_MARKS}g([1-9][0-9]*)-\d{{5}}-of-", file)
    return int(found.group(1)) if found else 1


def is_shard_file_of(file: str, name: str, split: str) -> bool:
    """Whether `file` is a shard file name of dataset `name`'s `split`, of any generation."""
    pattern = rf"{re.escape(name)}-{re.escape(split)}{SHARD_MARKS}(g[1-9][0-9]*-)?\d{{5}}-of-\d{{5}}(\.gz)?"
    return re.fullmatch(pattern, file) is not None


# The longest file name most file systems allow (NAME_MAX: ext4, XFS, APFS; GCS allows longer object names).
NAME_MAX_BYTES = 255
_TEMP_SUFFIX_CHARS = 33  # "." and a 32-digit hex token: shardsmith/shard_writer/shard_output.py's temporary names


def longest_file_name(name: str) -> str:
    """The longest file name a build of dataset `name` writes (with up to 99,999 shards): a gzip validation
    shard's temporary name. Every file of the build fits NAME_MAX_BYTES when this does."""
    final = shard_file_name(name, "validation", 0, 0, "gzip")
    return f"{TEMP_PREFIX}{final}.{'0' * (_TEMP_SUFFIX_CHARS - 1)}"


# Beside each uncompressed shard: its record index, `<shard file name>.idx` (shardsmith/format/record_index.py).
INDEX_SUFFIX = ".idx"


def index_file_name(shard_file: str) -> str:
    """The name of a shard's index file: the shard's name with `.idx` added (what DALI and `tfrecord` expect)."""
    return shard_file + INDEX_SUFFIX


# With --incremental, beside each shard in the build's folder: the identities of its records, in record order
# (shardsmith/format/row_list.py), read by the next incremental build to tell new rows from carried ones.
ROWS_DIR = "rows"


def row_list_name(shard_file: str) -> str:
    """The row list of a shard, relative to the build's folder: `rows/<shard file name>.jsonl`."""
    return f"{ROWS_DIR}/{shard_file}.jsonl"


def shard_file_pattern(name: str | None = None, file_format: RecordFileFormat = TFRECORD) -> str:
    """The glob (and fnmatch) pattern of the shard files of dataset `name`, or of any dataset. Index files
    (INDEX_SUFFIX) match it too: tell them apart by their suffix."""
    return f"{name}-*{file_format.shard_mark}*" if name else f"*{file_format.shard_mark}*"
