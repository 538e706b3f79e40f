"""TensorFlow Datasets compatibility: the files `tfds.builder_from_directory(D)` reads, made from metadata.json.

TFDS describes a prepared dataset with `dataset_info.json` (a DatasetInfo proto in protobuf's JSON form: name,
version, file format, per split the shard lengths, byte count and file name template) and `features.json` (the
FeatureConnector tree, also protobuf JSON), plus one `<feature>.labels.txt` per ClassLabel with its names. All of
them are plain JSON or text, so they are written here from metadata.json alone, without importing TFDS or
TensorFlow, and they are byte-identical for identical metadata.

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
- Shard files are named `<name>-<split>.tfrecord-XXXXX-of-YYYYY`, TFDS's default template, so no file is
  renamed or copied.
"""

from __future__ import annotations

import json

from shardsmith.format.example import IMAGE, LABEL
from shardsmith.format.metadata_schema import Metadata

DATASET_INFO_FILE = "dataset_info.json"
FEATURES_FILE = "features.json"
# TFDS stores ClassLabel names beside features.json, named after the feature with "/" turned into ".".
LABEL_NAMES_FILE = LABEL.replace("/", ".") + ".labels.txt"
# Every file this module may write (the build's --overwrite and retry logic can match on these).
TFDS_FILE_NAMES = (DATASET_INFO_FILE, FEATURES_FILE, LABEL_NAMES_FILE)
TFDS_VERSION = "1.0.0"
FILE_TEMPLATE = "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"

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


def dataset_info_json(metadata: Metadata) -> dict:
    splits = []
    for split, info in metadata.splits.items():
        if not info.shards:
            continue
        splits.append({
            "name": split,
            "numBytes": str(info.num_bytes),
            "shardLengths": [str(shard.num_examples) for shard in info.shards],
            "filepathTemplate": FILE_TEMPLATE,
        })
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
        "fileFormat": "tfrecord",
        "splits": splits,
        "supervisedKeys": {"tuple": {"items": [{"featureKey": IMAGE}, {"featureKey": LABEL}]}},
    }


def tfds_metadata_files(metadata: Metadata) -> dict[str, bytes]:
    """File name -> content of the TFDS metadata files for a dataset described by `metadata` (its metadata.json).
    Empty for gzip-compressed datasets, which TFDS cannot read, and for an --incremental version whose shards lie
    in more than one build's folder (TFDS reads one folder and numbers shards 0..N-1 in it). Pure: no I/O, no
    TensorFlow."""
    if metadata.compression_or_default != "none":
        return {}
    if metadata.incremental is not None and metadata.incremental.generations > 1:
        return {}
    if IMAGE not in metadata.features or LABEL not in metadata.features:
        return {}
    if any(kind not in ("bytes", "int64") for kind in metadata.features.values()):
        return {}  # list and float features (multi_label, extra columns) have no description here yet

    def dump(value: dict) -> bytes:
        return (json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")

    return {
        DATASET_INFO_FILE: dump(dataset_info_json(metadata)),
        FEATURES_FILE: dump(features_json(metadata)),
        LABEL_NAMES_FILE: "".join(label + "\n" for label in metadata.labels).encode("utf-8"),
    }
