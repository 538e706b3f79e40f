"""TensorFlow Datasets compatibility: the files TFDS's read-only builders read, made from metadata.json.

TFDS describes a prepared dataset with `dataset_info.json` (a DatasetInfo proto in protobuf's JSON form: name,
version, file format, per split the shard lengths, byte count and file name template) and `features.json` (the
FeatureConnector tree, also protobuf JSON), plus one `<feature>.labels.txt` per ClassLabel with its names. All of
them are plain JSON or text, so they are written here from metadata.json alone, without importing TFDS or
TensorFlow, and they are byte-identical for identical metadata.

Where they go (`tfds_metadata_files` gives paths relative to the version's build folder):

- A version whose shards are one generation in its own folder (a full build, a compacted version) gets them in
  that folder: `tfds.builder_from_directory(builds/<id>)` reads it.
- A version whose shards lie in several build folders or come from several --incremental generations gets one
  TFDS builder folder per *part* (the shards of one generation that lie in one build folder), `tfds/00000/`,
  `tfds/00001/`, ... inside its own folder, each with the three files; `tfds_builder_dirs` lists them and
  `tfds.builder_from_directories([those folders])` reads the version. That is TFDS's own way to read a split
  spread over several folders: it merges each split's parts into a `MultiSplitInfo` (TFDS 4.6 and later). A
  part's `filepathTemplate` names its shard files relative to its folder (`../../<prefix>{SHARD_X_OF_Y}` for
  this folder's, `../../../<build>/<prefix>{SHARD_X_OF_Y}` for an earlier build's), and its `shardLengths`
  runs over the generation's whole numbering, 0 for a shard this version takes from another folder (one
  rewritten there without its removed rows) or not at all: TFDS skips a shard of length 0 without opening it.
  The `..` is resolved by the operating system, so this reads a local disk or a mounted bucket (Cloud Storage
  FUSE); TensorFlow's gs:// file system takes an object name as written and does not resolve it.

Nothing is written into an earlier build's folder, and no shard is renamed, copied or rewritten for TFDS.

The records are not rewritten for TFDS, so the features keep shardsmith's flat keys: TFDS accepts a top-level
feature named `image/encoded` and serializes it under that same key. What TFDS yields for each record is
therefore a flat dict with the same keys as the records, where `image/encoded` is the *decoded* image
(uint8, height x width x 3) and `image/class/label` a ClassLabel with the names of labels.txt; `as_supervised=True`
gives (image, label). The gaps, each forced by keeping the record keys and bytes unchanged:

- TFDS's convention is `image` and `label`; here they are `image/encoded` and `image/class/label`.
- The Image feature is declared with 3 channels, so TFDS decodes grayscale and RGBA files to RGB (as
  `tf.io.decode_image(..., channels=3)` does); `image/channels` still holds the stored file's channel count.
- TFDS reads TFRecord files without decompression, so a dataset built with `--compression gzip` gets no TFDS
  files at all (`tfds_metadata_files` returns an empty dict); `shardsmith.load` reads it.
- Shard files are named `<name>-<split>.tfrecord-XXXXX-of-YYYYY` (with `gN-` before the numbers for a later
  generation), which TFDS's templates name, so no file is renamed or copied.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from shardsmith.format.example import IMAGE, LABEL
from shardsmith.format.metadata_schema import Metadata
from shardsmith.format.naming import BUILD_ID, shard_generation
from shardsmith.format.record_file import record_file

DATASET_INFO_FILE = "dataset_info.json"
FEATURES_FILE = "features.json"
# TFDS stores ClassLabel names beside features.json, named after the feature with "/" turned into ".".
LABEL_NAMES_FILE = LABEL.replace("/", ".") + ".labels.txt"
# The files of one TFDS builder folder: the version's own folder, or each of its tfds/<part>/ folders.
TFDS_FILE_NAMES = (DATASET_INFO_FILE, FEATURES_FILE, LABEL_NAMES_FILE)
# In a version of several shard sets: one TFDS builder folder per set, tfds/00000/, tfds/00001/, ...
PARTS_DIR = "tfds"
TFDS_VERSION = "1.0.0"
FILE_TEMPLATE = "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"
# A shard file name: what comes before its numbers (`<name>-<split>.tfrecord-` or `...tfrecord-gN-`), its index
# and the count of its generation's shards in the split.
_SHARD_NUMBERS = re.compile(r"(?P<prefix>[^/]+-)(?P<index>\d{5,})-of-(?P<count>\d{5,})")

_CLASS = "tensorflow_datasets.core.features."
_IMAGE = {"pythonClassName": _CLASS + "image_feature.Image",
          "image": {"shape": {"dimensions": ["-1", "-1", "3"]}, "dtype": "uint8"}}
_TEXT = {"pythonClassName": _CLASS + "text_feature.Text", "text": {}}
_INT64 = {"pythonClassName": _CLASS + "scalar.Scalar",
          "tensor": {"shape": {}, "dtype": "int64", "encoding": "none"}}


def _feature(key: str, kind: str, num_labels: int) -> dict:
    if key == IMAGE:
        return _IMAGE
    if key == LABEL:
        return {"pythonClassName": _CLASS + "class_label_feature.ClassLabel",
                "classLabel": {"numClasses": str(num_labels)}}
    if kind == "bytes":
        return _TEXT
    if kind == "int64":
        return _INT64
    raise ValueError(f"feature {key!r} has kind {kind!r}; TFDS metadata knows bytes and int64")


def features_json(metadata: Metadata) -> dict:
    num_labels = len(metadata.labels)
    return {
        "pythonClassName": _CLASS + "features_dict.FeaturesDict",
        "featuresDict": {"features": {key: _feature(key, kind, num_labels)
                                      for key, kind in metadata.features.items()}},
    }


@dataclass
class SplitShards:
    """One split's shards within a part: the names' prefix (`<name>-<split>.tfrecord-`, `gN-` after it for a
    later generation), the generation's shard count in the split, and the lengths by index (0: not in this
    version here)."""

    prefix: str
    count: int
    shard_lengths: list[int]
    num_bytes: int = 0

    def template(self, build: str | None, relative_to_part: bool) -> str:
        """The TFDS filepathTemplate of these shards, seen from the version's folder, or from a tfds/<part>/
        folder inside it (`relative_to_part`) for shards in the version's folder (`build` None) or another's."""
        name = self.prefix.replace("{", "{{").replace("}", "}}") + "{SHARD_X_OF_Y}"
        if not relative_to_part:
            return name
        return f"../../{name}" if build is None else f"../../../{build}/{name}"


@dataclass
class TfdsPart:
    """The shards of one generation that lie in one build folder (`build`; None: the version's own): what one
    TFDS builder folder describes, one template per split."""

    build: str | None
    generation: int
    splits: dict[str, SplitShards] = field(default_factory=dict)


def tfds_parts(metadata: Metadata) -> list[TfdsPart] | None:
    """The version's shards by build folder and generation, in the order metadata.json first lists each; None
    when a shard's name or folder is not one shardsmith writes (TFDS then gets no files)."""
    parts: dict[tuple[str | None, int], TfdsPart] = {}
    for split, shard in metadata.all_shards():
        numbers = _SHARD_NUMBERS.fullmatch(shard.file)
        if numbers is None or shard.num_examples is None:
            return None
        if shard.build is not None and not BUILD_ID.fullmatch(shard.build):
            return None
        prefix, index, count = numbers["prefix"], int(numbers["index"]), int(numbers["count"])
        if index >= count:
            return None
        generation = shard_generation(shard.file)
        part = parts.setdefault((shard.build, generation), TfdsPart(shard.build, generation))
        shards = part.splits.setdefault(split, SplitShards(prefix, count, [0] * count))
        if (shards.prefix, shards.count) != (prefix, count):
            return None
        shards.shard_lengths[index] = shard.num_examples
        shards.num_bytes += shard.num_bytes or 0
    return list(parts.values())


def _split_entry(metadata: Metadata, split: str, part: TfdsPart, relative_to_part: bool) -> dict:
    shards = part.splits[split]
    template, num_bytes = shards.template(part.build, relative_to_part), shards.num_bytes
    if not relative_to_part:  # the whole split: as metadata.json counts it
        num_bytes = metadata.splits[split].num_bytes
        if shards.prefix == f"{metadata.name}-{split}{record_file(metadata.format).shard_mark}":
            template = FILE_TEMPLATE  # TFDS's default spelling of the same names
    return {
        "name": split,
        "numBytes": str(num_bytes),
        "shardLengths": [str(length) for length in shards.shard_lengths],
        "filepathTemplate": template,
    }


def dataset_info_json(metadata: Metadata, splits: list[dict]) -> dict:
    labels = metadata.labels
    shown = ", ".join(labels[:10]) + (", ..." if len(labels) > 10 else "")
    description = (
        f"{metadata.num_examples} images in {len(labels)} classes ({shown}), built by shardsmith with seed "
        f"{metadata.seed}. Each record keeps shardsmith's keys: '{IMAGE}' is the decoded image (RGB) and "
        f"'{LABEL}' the class id (names in labels.txt); see metadata.json."
    )
    return {
        "name": metadata.name,
        "version": TFDS_VERSION,
        "description": description,
        "fileFormat": record_file(metadata.format).name,
        "splits": splits,
        "supervisedKeys": {"tuple": {"items": [{"featureKey": IMAGE}, {"featureKey": LABEL}]}},
    }


def _readable(metadata: Metadata) -> bool:
    if metadata.compression_or_default != "none":
        return False
    if IMAGE not in metadata.features or LABEL not in metadata.features:
        return False
    # list and float features (multi_label, extra columns) have no description here yet
    return all(kind in ("bytes", "int64") for kind in metadata.features.values())


def _dump(value: dict) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def _part_dir(number: int) -> str:
    return f"{PARTS_DIR}/{number:05d}"


def tfds_metadata_files(metadata: Metadata) -> dict[str, bytes]:
    """Path (relative to the version's build folder) -> content of the TFDS metadata files for the version
    `metadata` (its metadata.json) describes: the three files in the folder itself when each split is one shard
    set there, else the three in each tfds/<part>/ folder (see the module). Empty for gzip-compressed datasets,
    which TFDS cannot read, and for features TFDS metadata does not describe here. Pure: no I/O, no
    TensorFlow."""
    if not _readable(metadata):
        return {}
    parts = tfds_parts(metadata)
    if parts is None:
        return {}
    features = _dump(features_json(metadata))
    label_names = "".join(label + "\n" for label in metadata.labels).encode("utf-8")
    if len(parts) == 1 and parts[0].build is None:  # one generation, in the version's own folder
        splits = [_split_entry(metadata, split, parts[0], relative_to_part=False) for split in parts[0].splits]
        return {
            DATASET_INFO_FILE: _dump(dataset_info_json(metadata, splits)),
            FEATURES_FILE: features,
            LABEL_NAMES_FILE: label_names,
        }
    files = {}
    for number, part in enumerate(parts):
        splits = [_split_entry(metadata, split, part, relative_to_part=True) for split in part.splits]
        folder = _part_dir(number)
        files[f"{folder}/{DATASET_INFO_FILE}"] = _dump(dataset_info_json(metadata, splits))
        files[f"{folder}/{FEATURES_FILE}"] = features
        files[f"{folder}/{LABEL_NAMES_FILE}"] = label_names
    return files


def tfds_builder_dirs(metadata: Metadata) -> list[str]:
    """The TFDS builder folders of the version, relative to its build folder ("." for the folder itself), in
    order: pass all of them to `tfds.builder_from_directories` (one "." also reads with
    `tfds.builder_from_directory`). Empty when the version has no TFDS files."""
    return sorted({path.rsplit("/", 1)[0] if "/" in path else "." for path in tfds_metadata_files(metadata)})
