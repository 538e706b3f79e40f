"""With --feature: tensorflow-transform over the rows, so that transform_fn/ holds the statistics
of the extra columns beside the label vocabulary, and training applies what the analysis saw.

For each feature the transform outputs, under the feature's name: numeric (int, float and their lists): the
value scaled to z-score with the mean and variance of the analyzed rows (`tft.scale_to_z_score`); string
(and string lists): the id in a vocabulary of the analyzed rows' values (`feature_<name>` under
transform_fn/assets, most frequent first, -1 for a value it never saw). `label_id` is the same mapping as
without features: the ids of labels.txt.

Analyzed rows: those the label vocabulary was taken from (the training split; every row when there is none),
so evaluation rows never leak into the statistics. Unlike the vocabulary-only step (labels.py), this one runs
inside the build's own graph, one instance per row, and imports TensorFlow when the graph is built.
Memory: tft's combiners (one value per distinct string, a few numbers per numeric feature); never image bytes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import apache_beam as beam

from shardsmith.format.transform_fn import TRANSFORM_VOCAB_NAME
from shardsmith.manifest import FixedLabels, ManifestFormat
from shardsmith.output_folder import BuildTarget, LockGuard, move_transform_output, transform_scratch
from shardsmith.rows import RowBatch
from transforms.labels import Vocabulary, labels_of

SINGLE_LABEL_TASKS = ("classification", "segmentation")


def feature_vocab_name(name: str) -> str:
    return "feature_" + re.sub(r"[^A-Za-z0-9_]", "_", name)


def row_instances(batch: RowBatch, vocabulary: Vocabulary, task: str) -> Iterator[dict]:
    """One tft instance per analyzed row: its label(s), a weight per label, and its feature values.

    tft.vocabulary orders tokens by descending total weight. A row carrying label k (of N) weighs
    (N - k) / (images carrying k), so label k totals N - k over the analyzed rows, whose per-label image
    counts are exactly vocabulary.image_counts: tft's order is then labels.txt's order. The float32 sums
    stay within 0.5 of N - k for any realistic N (errors near 1e-7 relative per addition)."""
    index = {label: i for i, label in enumerate(vocabulary.labels)}
    num_labels = len(vocabulary.labels)
    for row in batch:
        if vocabulary.taken_from == "train" and row.split != "train":
            continue
        ids = sorted({index[label] for label in labels_of(row)})
        weights = [(num_labels - i) / vocabulary.image_counts[i] for i in ids]
        if task in SINGLE_LABEL_TASKS:
            instance = {"label": vocabulary.labels[ids[0]], "rank_weight": weights[0]}
        else:
            instance = {"label": [vocabulary.labels[i] for i in ids], "rank_weight": weights}
        for name, value in row.annotation.features:
            instance[name] = list(value) if isinstance(value, tuple) else value
        yield instance


def raw_feature_spec(task: str, features: tuple[tuple[str, str], ...]) -> dict:
    import tensorflow as tf

    dtypes = {"int": tf.int64, "float": tf.float32, "string": tf.string}
    single = task in SINGLE_LABEL_TASKS
    spec = {
        "label": tf.io.FixedLenFeature([], tf.string) if single else tf.io.VarLenFeature(tf.string),
        "rank_weight": tf.io.FixedLenFeature([], tf.float32) if single else tf.io.VarLenFeature(tf.float32),
    }
    for name, kind in features:
        scalar = kind.removesuffix("_list")
        dtype = dtypes[scalar]
        spec[name] = tf.io.FixedLenFeature([], dtype) if scalar == kind else tf.io.VarLenFeature(dtype)
    return spec


def fixed_label_ids(label, fixed_labels: tuple[str, ...]):
    """`label`'s ids in a vocabulary of exactly `fixed_labels`, in their order, rows or no rows: tft counts the
    constant list once per batch with label k weighing N - k, so every label is in it (an empty class too) and
    tft's order, by descending total weight, is the list's."""
    import tensorflow as tf
    import tensorflow_transform as tft

    num_labels = len(fixed_labels)
    vocabulary = tft.vocabulary(tf.constant(fixed_labels),
                                weights=tf.constant([float(num_labels - i) for i in range(num_labels)]),
                                vocab_filename=TRANSFORM_VOCAB_NAME)
    return tft.apply_vocabulary(label, vocabulary, default_value=-1)


def make_preprocessing_fn(features: tuple[tuple[str, str], ...], fixed_labels: tuple[str, ...] = ()):
    """tft's preprocessing_fn: `label_id` and each feature's output. With `fixed_labels` (--label_file FILE), the
    label vocabulary is that list, not the analyzed rows' labels (a listed label may have no training row)."""
    def preprocessing_fn(inputs):
        import tensorflow as tf
        import tensorflow_transform as tft

        label, weights = inputs["label"], inputs["rank_weight"]
        if isinstance(weights, tf.SparseTensor):
            weights = weights.values  # tft takes dense weights, aligned with the labels' values
        if fixed_labels:
            outputs = {"label_id": fixed_label_ids(label, fixed_labels)}
        else:
            outputs = {"label_id": tft.compute_and_apply_vocabulary(label, weights=weights, default_value=-1,
                                                                    vocab_filename=TRANSFORM_VOCAB_NAME)}
        for name, kind in features:
            value = inputs[name]
            if kind.startswith("string"):
                outputs[name] = tft.compute_and_apply_vocabulary(value, default_value=-1,
                                                                 vocab_filename=feature_vocab_name(name))
            else:
                if isinstance(value, tf.SparseTensor):
                    value = tf.SparseTensor(value.indices, tf.cast(value.values, tf.float32), value.dense_shape)
                else:
                    value = tf.cast(value, tf.float32)
                outputs[name] = tft.scale_to_z_score(value)
        return outputs

    return preprocessing_fn


def gated_by_lock(transform_fn, lock: LockGuard | None):
    """AnalyzeDataset's (saved model dir, metadata), each passed on only after `lock` is checked: tft's
    WriteTransformFn creates the build's folder if it is missing, so it must not start for a build whose lock
    was taken over (whose folder the new holder removed)."""
    if lock is None:
        return transform_fn
    saved_model_dir, metadata = transform_fn
    return (
        saved_model_dir | "CheckLockBeforeTransformFn" >> beam.Map(_checked, lock),
        metadata._replace(deferred_metadata=metadata.deferred_metadata
                          | "CheckLockBeforeMetadata" >> beam.Map(_checked, lock)),
    )


def _checked(value, lock: LockGuard):
    lock.check()
    return value


class AnalyzeRows(beam.PTransform):
    """Labelled RowBatches -> transform_fn/ and transformed_metadata/ written into the target's build folder (a
    PCollection of that folder once written). `vocabulary`: the one-element PCollection of the Vocabulary; `fixed`: the
    --label_file list it holds, when given. tft writes into a scratch folder of the build's, listed in its record
    when the graph is made; its files are listed, then moved into place."""

    def __init__(self, vocabulary, target: BuildTarget, temp_dir: str, manifest: ManifestFormat,
                 fixed: FixedLabels | None = None):
        super().__init__()
        self._fixed_labels = fixed.labels if fixed is not None else ()
        self._lock = target.lock  # checked before transform_fn is written
        self._vocabulary = vocabulary
        self._output_dir = target.files_dir
        self._temp_dir = temp_dir
        self._task = manifest.task
        self._features = manifest.features

    def expand(self, batches):
        import tensorflow_transform.beam as tft_beam
        from tensorflow_transform.tf_metadata import dataset_metadata, schema_utils

        raw_metadata = dataset_metadata.DatasetMetadata(
            schema_utils.schema_from_feature_spec(raw_feature_spec(self._task, self._features)))
        instances = batches | "RowInstances" >> beam.FlatMap(
            row_instances, beam.pvalue.AsSingleton(self._vocabulary), self._task)
        scratch = transform_scratch(self._output_dir)
        with tft_beam.Context(temp_dir=self._temp_dir, force_tf_compat_v1=False):
            transform_fn = (instances, raw_metadata) | "AnalyzeDataset" >> tft_beam.AnalyzeDataset(
                make_preprocessing_fn(self._features, self._fixed_labels))
            written = gated_by_lock(transform_fn, self._lock) | "WriteTransformFn" >> tft_beam.WriteTransformFn(
                scratch)
        return written | "TransformFnDone" >> beam.Map(_moved_into_place, scratch, self._output_dir, self._lock)


def _moved_into_place(_, scratch: str, output_dir: str, lock: LockGuard | None) -> str:
    if lock is not None:
        lock.check()
    move_transform_output(scratch, output_dir)
    return output_dir
