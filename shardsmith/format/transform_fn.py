"""transform_fn/ and transformed_metadata/ for a label vocabulary, written without TensorFlow.

`tft.TFTransformOutput(folder)` loads what `write_transform_fn` writes, and it maps each label to its id (its
line in labels.txt) and any other string to -1, as tensorflow-transform's own `compute_and_apply_vocabulary`
output does (tests/shardsmith/format/test_transform_fn.py compares the two on the same vocabularies). The SavedModel is
a template made once by tft (shardsmith/format/transform_fn_template.py), in which the two values that depend on the
vocabulary have fixed-length encodings; each build writes the vocabulary file and the template with those values
overwritten in place. A build thus never imports TensorFlow for its labels (7-10 s of CPU per build on a
2-core machine), and the same vocabulary gives the same bytes.

Guarantees: deterministic (same labels, same bytes); every file written atomically and listed in the build's
written list first (build_record.py); local and gs:// alike (shardsmith.storage).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence

from shardsmith import storage
from shardsmith.format.build_record import write_atomically
from shardsmith.format.naming import TRANSFORM_DIRS, join

TRANSFORM_VOCAB_NAME = "labels"  # the asset's name: `TFTransformOutput.vocabulary_by_name("labels")`
TEMPLATE_DIR = os.path.join(os.path.dirname(__file__), "transform_fn_template")
# The vocabulary size in the template: any value whose varint takes 4 bytes, unlikely elsewhere in the proto.
SIZE_SENTINEL = 0x0ABCDEF
_SIZE_VARINT_BYTES = 4
MAX_LABELS = (1 << (7 * _SIZE_VARINT_BYTES)) - 1  # what a 4-byte varint holds
# The lookup table's shared name in the template; each vocabulary gets its own (its digest), so two transform_fns
# loaded in one process never share a table.
TABLE_NAME_PLACEHOLDER = b"shardsmith_labels_" + b"0" * 64
_PACKED_INT64_VAL_TAG = bytes([(10 << 3) | 2])  # TensorProto.int64_val, packed
# An empty vocabulary (every row an error row) is written as tensorflow-transform writes one: a single
# placeholder token (tft's is a random UUID), so that the lookup table is not empty and every label maps to -1.
EMPTY_VOCABULARY_TOKEN = "shardsmith-empty-vocabulary-8f1c2a6e"


def padded_varint(value: int, width: int = _SIZE_VARINT_BYTES) -> bytes:
    """`value` as a protobuf varint of exactly `width` bytes (continuation bits on zero groups: protobuf parsers
    read non-minimal varints as the same number)."""
    if not 0 <= value < 1 << (7 * width):
        raise ValueError(f"{value} does not fit a {width}-byte varint")
    groups = [(value >> (7 * i)) & 0x7F for i in range(width)]
    return bytes(g | 0x80 for g in groups[:-1]) + bytes(groups[-1:])


def _size_field(size: int) -> bytes:
    return _PACKED_INT64_VAL_TAG + bytes([_SIZE_VARINT_BYTES]) + padded_varint(size)


def _replaced(data: bytes, old: bytes, new: bytes) -> bytes:
    if len(old) != len(new):
        raise ValueError("a template value must keep its length")
    if data.count(old) == 0:
        raise ValueError(f"the transform_fn template has no {old!r}: regenerate it "
                         "(python -m shardsmith.format.transform_fn_template)")
    return data.replace(old, new)


def saved_model_bytes(labels: Sequence[str]) -> bytes:
    """The template's saved_model.pb with the vocabulary's size and its own table name."""
    if not 0 < len(labels) <= MAX_LABELS:
        raise ValueError(f"a vocabulary of {len(labels)} labels: transform_fn holds 1 to {MAX_LABELS}")
    with open(os.path.join(TEMPLATE_DIR, "saved_model.pb"), "rb") as f:
        template = f.read()
    digest = hashlib.sha256(vocabulary_bytes(labels)).hexdigest().encode()
    named = _replaced(template, TABLE_NAME_PLACEHOLDER, TABLE_NAME_PLACEHOLDER[:-len(digest)] + digest)
    return _replaced(named, _size_field(SIZE_SENTINEL), _size_field(len(labels)))


def vocabulary_bytes(labels: Sequence[str]) -> bytes:
    """The vocabulary asset: one label per line in id order, as tft writes it."""
    if any("\n" in label or "\r" in label for label in labels):
        raise ValueError("a label holds a line break; the vocabulary file has one label per line")
    return "".join(f"{label}\n" for label in labels).encode("utf-8")


def schema_text(num_labels: int) -> bytes:
    """transformed_metadata/schema.pbtxt: `label_id`, an int in [-1, num_labels - 1], as tft writes it."""
    return (
        'feature {\n  name: "label_id"\n  type: INT\n  int_domain {\n    min: -1\n'
        f"    max: {num_labels - 1}\n"
        "    is_categorical: true\n  }\n  presence {\n    min_fraction: 1.0\n  }\n  shape {\n  }\n}\n"
    ).encode()


def transform_files(labels: Sequence[str]) -> dict[str, bytes]:
    """Every file of transform_fn/ and transformed_metadata/, by path relative to the build's folder."""
    labels = tuple(labels) or (EMPTY_VOCABULARY_TOKEN,)
    transform_fn, transformed_metadata = TRANSFORM_DIRS
    files = {f"{transform_fn}/saved_model.pb": saved_model_bytes(labels),
             f"{transform_fn}/assets/{TRANSFORM_VOCAB_NAME}": vocabulary_bytes(labels),
             f"{transformed_metadata}/schema.pbtxt": schema_text(len(labels)),
             f"{transformed_metadata}/asset_map": f'{{"{TRANSFORM_VOCAB_NAME}": "{TRANSFORM_VOCAB_NAME}"}}'.encode()}
    for name in ("variables.index", "variables.data-00000-of-00001"):
        with open(os.path.join(TEMPLATE_DIR, "variables", name), "rb") as f:
            files[f"{transform_fn}/variables/{name}"] = f.read()
    return files


def write_transform_fn(labels: Sequence[str], files_dir: str) -> str:
    """Writes transform_fn/ and transformed_metadata/ for `labels` (ids in sequence order) into the build folder
    `files_dir`; returns `files_dir`. Idempotent: a retried write writes the same bytes."""
    files = {join(files_dir, relative): data for relative, data in transform_files(labels).items()}
    for folder in sorted({storage.parent(path) for path in files}):
        storage.make_folders(folder, exist_ok=True)
    for path, data in files.items():
        write_atomically(path, data)
    return files_dir
