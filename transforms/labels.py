"""The label vocabulary. Ids are 0..N-1 in alphabetical (code point) order of the label text of the
training split, the convention of Keras' image_dataset_from_directory and torchvision's ImageFolder.

The vocabulary is computed from manifest rows only (never image bytes). tensorflow-transform analyzes the
vocabulary and writes `transform_fn/`, which maps label text to exactly these ids (see `AnalyzeLabels`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

import apache_beam as beam

from shardsmith.core.build_lock import LockGuard
from shardsmith.core.rows import ErrorRow, ManifestRow, RowBatch, placing_label_id
from shardsmith.format.build_folder import move_transform_output, transform_scratch
from transforms import ERRORS
from transforms.metrics import rejected

STAGE = "label"
TRANSFORM_VOCAB_NAME = "labels"


@dataclass(frozen=True)
class Vocabulary:
    """Label texts in id order, and which rows they were taken from: "train", or "all" when the inputs have
    no training rows at all (a test-only manifest still gets consistent ids). `image_counts[i]`: how many of
    those rows (images) carry label i; it picks the label that places a row with several (`stratum_id`)."""

    labels: tuple[str, ...]
    taken_from: str
    image_counts: tuple[int, ...] = ()


def labels_of(row: ManifestRow) -> tuple[str, ...]:
    """Every label of a row: several for multi_label and detection rows, else its one label."""
    if row.annotation is not None and row.annotation.labels:
        return row.annotation.labels
    return (row.label,)


def vocabulary_from(counts: Iterable[tuple[tuple[bool, str], int]]) -> Vocabulary:
    """Sorted distinct labels of the training rows; of all rows when the inputs have no training split.
    `counts`: ((is a training row, label), number of rows with that label)."""
    counts = list(counts)
    train = {label: n for (is_train, label), n in counts if is_train}
    if train:
        return Vocabulary(tuple(sorted(train)), "train", tuple(train[label] for label in sorted(train)))
    every: Counter[str] = Counter()
    for (_, label), n in counts:
        every[label] += n
    return Vocabulary(tuple(sorted(every)), "all", tuple(every[label] for label in sorted(every)))


def _label_counts(batch: RowBatch) -> Iterable[tuple[tuple[bool, str], int]]:
    counts: Counter[tuple[bool, str]] = Counter()
    for row in batch:
        is_train = row.split == "train"
        for label in set(labels_of(row)):
            counts[(is_train, label)] += 1
    return counts.items()


class ComputeVocabulary(beam.PTransform):
    """RowBatches -> a one-element PCollection holding the Vocabulary. Memory: distinct labels only."""

    def expand(self, batches):
        return (
            batches
            | "CountLabelsOfBatch" >> beam.FlatMap(_label_counts)
            | "CountLabels" >> beam.CombinePerKey(sum)
            | "CollectLabels" >> beam.combiners.ToList()
            | "SortLabels" >> beam.Map(vocabulary_from)
        )


class AttachLabelIdFn(beam.DoFn):
    """RowBatch -> the rows whose labels are all known, with `label_id` set (one RowBatch); ErrorRows tagged
    `errors`. A row with several labels is placed by its rarest: the label carried by the fewest images
    (ties: the lower id), so rare labels are spread over the shards as evenly as the common ones."""

    def process(self, batch: RowBatch, vocabulary: Vocabulary) -> Iterator:
        ids = self._ids(vocabulary)
        labelled: RowBatch = []
        for row in batch:
            if row.annotation is None or not row.annotation.labels:
                label_id = ids.get(row.label)
                if label_id is not None:
                    labelled.append(dataclasses.replace(row, label_id=label_id))
                    continue
                unknown = row.label
            else:
                label_ids = tuple(ids.get(label, -1) for label in row.annotation.labels)
                if -1 not in label_ids:
                    labelled.append(self._with_ids(row, label_ids, vocabulary))
                    continue
                unknown = row.annotation.labels[label_ids.index(-1)]
            yield rejected(
                ErrorRow.for_row(row, STAGE, f"label {unknown!r} does not appear in the training split",
                                 "label ids come from the training split; add training examples of it"),
            )
        if labelled:
            yield labelled

    @staticmethod
    def _with_ids(row: ManifestRow, label_ids: tuple[int, ...], vocabulary: Vocabulary) -> ManifestRow:
        annotation = row.annotation
        if not annotation.boxes:  # multi_label: the labels in id order
            label_ids = tuple(sorted(label_ids))
            annotation = dataclasses.replace(annotation, labels=tuple(vocabulary.labels[i] for i in label_ids))
        stratum = placing_label_id(label_ids, vocabulary.image_counts)
        return dataclasses.replace(row, label=vocabulary.labels[stratum], label_id=stratum,
                                   annotation=dataclasses.replace(annotation, label_ids=label_ids))

    def _ids(self, vocabulary: Vocabulary) -> dict[str, int]:
        # The side input is the same object for a whole bundle; build the dict once per vocabulary.
        if getattr(self, "_ids_for", None) is not vocabulary:
            self._ids_for = vocabulary
            self._id_map = {label: i for i, label in enumerate(vocabulary.labels)}
        return self._id_map


class AttachLabelIds(beam.PTransform):
    """RowBatches -> batches with `label_id` set; rows whose label is not in the vocabulary leave as errors."""

    def __init__(self, vocabulary):
        super().__init__()
        self._vocabulary = vocabulary

    def expand(self, rows):
        return rows | "AttachLabelId" >> beam.ParDo(
            AttachLabelIdFn(), beam.pvalue.AsSingleton(self._vocabulary)
        ).with_outputs(ERRORS, main="rows")


def rank_weighted_instances(vocabulary: Vocabulary) -> Iterator[dict]:
    """One tft instance per label. tft.vocabulary orders tokens by descending total weight; weighting label id
    k by N - k makes tft's order our alphabetical order, whatever the label frequencies."""
    num_labels = len(vocabulary.labels)
    for label_id, label in enumerate(vocabulary.labels):
        yield {"label": label, "rank_weight": float(num_labels - label_id)}


def start_importing_tensorflow() -> None:
    """Starts importing tensorflow-transform (and TensorFlow: seconds of CPU) in a background thread.
    write_transform_fn imports it again, waiting for this import to finish; a failure here surfaces there.
    Started only where the process would otherwise sit idle: a thread doing imports slows every other
    thread of the process (measured: a stat() of 2 us took 40 us while TensorFlow imported beside it)."""

    def import_quietly():
        with contextlib.suppress(Exception):
            importlib.import_module("tensorflow_transform.beam")

    threading.Thread(target=import_quietly, name="import-tensorflow", daemon=True).start()


def write_transform_fn(vocabulary: Vocabulary, output_dir: str, temp_dir: str, lock: LockGuard | None = None) -> str:
    """Runs tensorflow-transform over the vocabulary, in a small local Beam pipeline of its own (one instance
    per label), and writes transform_fn/ and transformed_metadata/ into `output_dir`. Returns `output_dir`.
    With `lock`, checks first (after TensorFlow's import, seconds) that the build still holds the folder: tft
    creates `output_dir` if it is missing, so a build whose lock was taken over must not get that far.

    TensorFlow is imported here and nowhere else in the build (0.7 GB and seconds of start-up per process).
    Rewriting gives the same vocabulary file; a retried attempt overwrites a partial one. tft writes into a
    scratch folder of the build's own (its transform_tmp/ among it), listed in the build's record before tft
    starts, and each file it made is listed before it is moved into place."""
    import tensorflow as tf
    import tensorflow_transform as tft
    import tensorflow_transform.beam as tft_beam
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from tensorflow_transform.tf_metadata import dataset_metadata, schema_utils

    if lock is not None:
        lock.check()
    raw_metadata = dataset_metadata.DatasetMetadata(
        schema_utils.schema_from_feature_spec(
            {
                "label": tf.io.FixedLenFeature([], tf.string),
                "rank_weight": tf.io.FixedLenFeature([], tf.float32),
            }
        )
    )

    def preprocessing_fn(inputs):
        return {
            "label_id": tft.compute_and_apply_vocabulary(
                inputs["label"],
                weights=inputs["rank_weight"],
                default_value=-1,
                vocab_filename=TRANSFORM_VOCAB_NAME,
            )
        }

    scratch = transform_scratch(output_dir)
    with beam.Pipeline(runner=FnApiRunner()) as pipeline, tft_beam.Context(
        temp_dir=temp_dir, force_tf_compat_v1=False
    ):
        instances = pipeline | "Labels" >> beam.Create(list(rank_weighted_instances(vocabulary)), reshuffle=False)
        transform_fn = (instances, raw_metadata) | "AnalyzeDataset" >> tft_beam.AnalyzeDataset(preprocessing_fn)
        _ = gated_by_lock(transform_fn, lock) | "WriteTransformFn" >> tft_beam.WriteTransformFn(scratch)
    if lock is not None:
        lock.check()
    move_transform_output(scratch, output_dir)
    return output_dir


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


class TransformFnWriter(Protocol):
    """Writes transform_fn elsewhere (pipeline/running/transform_fn_process.py): `start` hands over a request and
    returns its key at once, `wait(key)` returns `output_dir` when it is written."""

    def start(self, vocabulary: Vocabulary, output_dir: str, temp_dir: str, lock: LockGuard | None = None) -> str:
        ...

    def wait(self, key: str) -> str: ...


class AnalyzeLabels(beam.PTransform):
    """The one-element vocabulary -> transform_fn/ and transformed_metadata/ written into `output_dir` (a
    one-element PCollection of `output_dir` once done). Its `label_id` output equals the ids in the records.
    tft sees one instance per label (not per row): the vocabulary is all it derives, and its cost then does
    not grow with the dataset.

    `after`, when given, is a PCollection this step waits for before it is done (the written shards).
    With a `writer`, the request goes to it as soon as the vocabulary is known and the step waits for it
    after `after`: the local build's tf.transform process works beside the writing. Without one, the worker
    runs tft itself, after `after` (TensorFlow's import then overlaps the writing instead of slowing it).
    `temp_dir` receives tft's scratch files and must lie outside the published output folder.
    """

    def __init__(self, output_dir: str, temp_dir: str, after=None, writer: TransformFnWriter | None = None,
                 lock: LockGuard | None = None):
        super().__init__()
        self._output_dir = output_dir
        self._temp_dir = temp_dir
        self._after = after
        self._writer = writer
        self._lock = lock

    def expand(self, vocabulary):
        waits = [beam.pvalue.AsList(self._after)] if self._after is not None else []
        writer = self._writer
        if writer is None:
            return vocabulary | "WriteTransformFn" >> beam.Map(
                lambda vocab, output_dir, temp_dir, lock, *_: write_transform_fn(vocab, output_dir, temp_dir, lock),
                self._output_dir, self._temp_dir, self._lock, *waits,
            )
        return (
            vocabulary
            | "StartTransformFn" >> beam.Map(writer.start, self._output_dir, self._temp_dir, self._lock)
            | "AwaitTransformFn" >> beam.Map(lambda key, *_: writer.wait(key), *waits)
        )
