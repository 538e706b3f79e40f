"""How the files under shardsmith/format/transform_fn_template/ were made, and the check that they still are.

A label vocabulary's transform_fn is the same TensorFlow graph for every vocabulary but for two values: the
vocabulary's size (three int64 constants) and the lookup table's shared name (tft puts its scratch path there).
`make_template` runs tensorflow-transform itself on two vocabularies (3 and 4 labels), finds exactly those
fields by comparing the two SavedModel protos, and saves the first with the size set to `SIZE_SENTINEL` and the
name set to `TABLE_NAME_PLACEHOLDER`: values whose encodings have fixed lengths, which
shardsmith/format/transform_fn.py overwrites in place for each build without importing TensorFlow.

Regenerate after upgrading tensorflow or tensorflow-transform:
`python -m shardsmith.format.transform_fn_template` (tests/shardsmith/format/test_transform_fn.py checks the files it
writes against a fresh tft run). Needs TensorFlow and tensorflow-transform; nothing in a build imports this module.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

from shardsmith.format.transform_fn import (
    SIZE_SENTINEL,
    TABLE_NAME_PLACEHOLDER,
    TEMPLATE_DIR,
    TRANSFORM_VOCAB_NAME,
)

# Files of tft's transform_fn/ that the template keeps: fingerprint.pb holds checksums of saved_model.pb that
# only TensorFlow computes (loaders treat it as optional); the vocabulary file is written per build.
TEMPLATE_FILES = ("saved_model.pb", "variables/variables.index", "variables/variables.data-00000-of-00001")


def tft_transform_fn(labels: tuple[str, ...], folder: str) -> str:
    """tensorflow-transform's own transform_fn/ and transformed_metadata/ for `labels` (ids in tuple order),
    written into `folder`: the reference every template-made transform_fn is checked against."""
    import apache_beam as beam
    import tensorflow as tf
    import tensorflow_transform as tft
    import tensorflow_transform.beam as tft_beam
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from tensorflow_transform.tf_metadata import dataset_metadata, schema_utils

    raw_metadata = dataset_metadata.DatasetMetadata(schema_utils.schema_from_feature_spec({
        "label": tf.io.FixedLenFeature([], tf.string),
        "rank_weight": tf.io.FixedLenFeature([], tf.float32),
    }))

    def preprocessing_fn(inputs):
        return {"label_id": tft.compute_and_apply_vocabulary(
            inputs["label"], weights=inputs["rank_weight"], default_value=-1, vocab_filename=TRANSFORM_VOCAB_NAME)}

    # tft orders by descending weight: weighting label k by N - k gives the tuple's order.
    instances = [{"label": label, "rank_weight": float(len(labels) - k)} for k, label in enumerate(labels)]
    with tempfile.TemporaryDirectory() as temp_dir, beam.Pipeline(runner=FnApiRunner()) as pipeline, \
            tft_beam.Context(temp_dir=temp_dir, force_tf_compat_v1=False):
        transform_fn = ((pipeline | beam.Create(instances, reshuffle=False), raw_metadata)
                        | tft_beam.AnalyzeDataset(preprocessing_fn))
        _ = transform_fn | tft_beam.WriteTransformFn(folder)
    return folder


def tft_transform_fn_in_process(labels: tuple[str, ...], folder: str) -> str:
    """tft_transform_fn in a fresh Python process: TensorFlow names the graph's functions with a counter per
    process, so two vocabularies compared must each come from a process of their own."""
    subprocess.run([sys.executable, "-m", "shardsmith.format.transform_fn_template", "--tft", folder, *labels],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return folder


def _differing_fields(first, second, path: str = "") -> list[tuple[object, str, object, object]]:
    """(message, field name, first value, second value) for each scalar field whose values differ between two
    protos of the same shape. Raises ValueError when their shapes differ."""
    found = []
    first_fields = {d.name: (d, v) for d, v in first.ListFields()}
    second_fields = {d.name: (d, v) for d, v in second.ListFields()}
    if first_fields.keys() != second_fields.keys():
        raise ValueError(f"{path}: fields differ: {sorted(first_fields.keys() ^ second_fields.keys())}")
    for name, (descriptor, value) in first_fields.items():
        other = second_fields[name][1]
        where = f"{path}.{name}"
        is_message = descriptor.type == descriptor.TYPE_MESSAGE
        if descriptor.message_type is not None and descriptor.message_type.GetOptions().map_entry:
            if value.keys() != other.keys():
                raise ValueError(f"{where}: map keys differ")
            for key in value:
                if descriptor.message_type.fields_by_name["value"].type == descriptor.TYPE_MESSAGE:
                    found += _differing_fields(value[key], other[key], f"{where}[{key}]")
                elif value[key] != other[key]:
                    raise ValueError(f"{where}[{key}]: a scalar map value differs")
        elif descriptor.is_repeated:
            if len(value) != len(other):
                raise ValueError(f"{where}: lengths differ")
            for i, (a, b) in enumerate(zip(value, other, strict=True)):
                if is_message:
                    found += _differing_fields(a, b, f"{where}[{i}]")
                elif a != b:
                    found.append((first, name, a, b))
        elif is_message:
            found += _differing_fields(value, other, where)
        elif value != other:
            found.append((first, name, value, other))
    return found


def make_template(target: str = TEMPLATE_DIR) -> None:
    """Writes the template files into `target` (see the module's docstring). Raises ValueError if tft's output
    differs between vocabularies in any other way than the size and the table name: the template would then be
    wrong for some vocabularies."""
    from tensorflow.core.protobuf import saved_model_pb2

    with tempfile.TemporaryDirectory() as work:
        protos = []
        for labels in (("a", "b", "c"), ("a", "b", "c", "d")):
            folder = tft_transform_fn_in_process(labels, os.path.join(work, str(len(labels))))
            proto = saved_model_pb2.SavedModel()
            with open(os.path.join(folder, "transform_fn", "saved_model.pb"), "rb") as f:
                proto.ParseFromString(f.read())
            protos.append(proto)
        sizes = names = 0
        for message, name, first, second in _differing_fields(*protos):
            if (first, second) == (3, 4) and name == "int64_val":
                values = getattr(message, name)
                values[list(values).index(3)] = SIZE_SENTINEL
                sizes += 1
            elif isinstance(first, bytes) and b"tftransform_tmp" in first:
                setattr(message, name, TABLE_NAME_PLACEHOLDER)
                names += 1
            else:
                raise ValueError(f"tft's transform_fn differs between vocabularies in {name}: {first!r}, {second!r}")
        if not sizes or not names:
            raise ValueError(f"found {sizes} size fields and {names} table names in tft's transform_fn; expected both")
        staged = os.path.join(work, "template")
        shutil.copytree(os.path.join(work, "3", "transform_fn"), staged,
                        ignore=shutil.ignore_patterns("fingerprint.pb", "assets"))
        with open(os.path.join(staged, "saved_model.pb"), "wb") as f:
            f.write(protos[0].SerializeToString(deterministic=True))
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(staged, target)


def main(argv: list[str]) -> None:
    if argv[:1] == ["--tft"]:  # tft_transform_fn_in_process's child
        tft_transform_fn(tuple(argv[2:]), argv[1])
        os._exit(0)  # TensorFlow with tft's graphs can crash in the interpreter's final garbage collection
    target = argv[0] if argv else TEMPLATE_DIR
    make_template(target)
    print(f"wrote the transform_fn template into {target}")


if __name__ == "__main__":
    main(sys.argv[1:])
