"""The label vocabulary. Ids are 0..N-1 in alphabetical (code point) order of the label text of the
training split, the convention of Keras' image_dataset_from_directory and torchvision's ImageFolder; with
`--label_file FILE` (a `FixedLabels`), 0..N-1 in the file's order, and a row with a label the file does not list is
an error row.

The vocabulary is computed from manifest rows only (never image bytes). `AnalyzeLabels` writes `transform_fn/`,
tensorflow-transform's SavedModel, which maps label text to exactly these ids.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import apache_beam as beam

from shardsmith.format.transform_fn import write_transform_fn
from shardsmith.manifest import FixedLabels
from shardsmith.output_folder import BuildTarget, LockGuard
from shardsmith.rows import ErrorRow, ManifestRow, RowBatch, placing_label_id
from transforms import ERRORS
from transforms.gather import Gather
from transforms.metrics import rejected
from transforms.row_coder import of_batches

STAGE = "label"


@dataclass(frozen=True)
class Vocabulary:
    """Label texts in id order, and which rows they were taken from: "train", or "all" when the inputs have
    no training rows at all (a test-only manifest still gets consistent ids). `image_counts[i]`: how many of
    those rows (images) carry label i; it picks the label that places a row with several (`stratum_id`).
    `listed_in`: the --label_file file the labels (and their order) come from; "" when taken from the rows."""

    labels: tuple[str, ...]
    taken_from: str
    image_counts: tuple[int, ...] = ()
    listed_in: str = ""


def labels_of(row: ManifestRow) -> tuple[str, ...]:
    """Every label of a row: several for multi_label and detection rows, else its one label."""
    if row.annotation is not None and row.annotation.labels:
        return row.annotation.labels
    return (row.label,)


LabelCounts = Iterable[tuple[tuple[str, str], int]]  # ((split, label), number of rows that carry the label)


def vocabulary_from(counts: LabelCounts, fixed: FixedLabels | None = None) -> Vocabulary:
    """Sorted distinct labels of the training rows; of all rows when the inputs have no training split.
    `counts`: ((split, label), number of rows of the split with that label). With `fixed`, its labels in its
    order, each counted over the training rows (all rows without any), 0 for a label no such row carries."""
    counts = list(counts)
    train: Counter[str] = Counter()
    for (split, label), n in counts:
        if split == "train":
            train[label] += n
    if fixed is not None:
        return _fixed_vocabulary(counts, train, fixed)
    if train:
        return Vocabulary(tuple(sorted(train)), "train", tuple(train[label] for label in sorted(train)))
    every: Counter[str] = Counter()
    for (_, label), n in counts:
        every[label] += n
    return Vocabulary(tuple(sorted(every)), "all", tuple(every[label] for label in sorted(every)))


def _fixed_vocabulary(counts: list[tuple[tuple[str, str], int]], train: Counter[str],
                      fixed: FixedLabels) -> Vocabulary:
    taken_from, counted = "train", Counter(train)
    if not train:
        taken_from, counted = "all", Counter()
        for (_, label), n in counts:
            counted[label] += n
    labels = fixed.labels
    if fixed.extendable:  # an --incremental build: labels first seen now follow, in alphabetical order
        labels += tuple(sorted(set(counted) - set(labels)))
    return Vocabulary(labels, taken_from, tuple(counted[label] for label in labels), fixed.path)


def _label_counts(batch: RowBatch, fixed: FixedLabels | None = None) -> LabelCounts:
    """((split, label), rows) of a batch; with `fixed`, of its rows whose labels it all lists (the others become
    error rows, so they count for nothing)."""
    listed = frozenset(fixed.labels) if fixed is not None and not fixed.extendable else None
    counts: Counter[tuple[str, str]] = Counter()
    for row in batch:
        if listed is not None and not listed.issuperset(labels_of(row)):
            continue
        for label in set(labels_of(row)):
            counts[(row.split, label)] += 1
    return counts.items()


class CountLabels(beam.PTransform):
    """RowBatches -> ((split, label), rows of the split that carry the label), one element per pair: what the
    vocabulary is taken from, and, for placement, a bound on the rows each label places. Memory: distinct
    (split, label) pairs only. With `fixed` (--label_file FILE), only rows whose labels it all lists count."""

    def __init__(self, fixed: FixedLabels | None = None):
        super().__init__()
        self._fixed = fixed

    def expand(self, batches):
        return (
            batches
            | "CountLabelsOfBatch" >> beam.FlatMap(_label_counts, self._fixed)
            | "SumPerLabel" >> beam.CombinePerKey(sum)
        )


class ComputeVocabulary(beam.PTransform):
    """Label counts (CountLabels) -> a one-element PCollection holding the Vocabulary. With `fixed` (--label_file
    FILE), the Vocabulary holds its labels in its order, whatever the rows carry."""

    def __init__(self, fixed: FixedLabels | None = None):
        super().__init__()
        self._fixed = fixed

    def expand(self, label_counts):
        return label_counts | "SortLabels" >> Gather(vocabulary_from, self._fixed)


class AttachLabelIdFn(beam.DoFn):
    """RowBatch -> the rows whose labels are all known, with `label_id` set (one RowBatch); ErrorRows tagged
    `errors`. A row with several labels is placed by its rarest: the label carried by the fewest images
    (ties: the lower id), so rare labels are spread over the shards as evenly as the common ones."""

    def process(self, batch: RowBatch, vocabulary: Vocabulary) -> Iterator:
        ids = self._ids(vocabulary)
        labelled = RowBatch()
        for row in batch:
            if row.annotation is None or not row.annotation.labels:
                label_id = ids.get(row.label)
                if label_id is not None:
                    labelled.append(row.replaced(label_id=label_id))
                    continue
                unknown = row.label
            else:
                label_ids = tuple(ids.get(label, -1) for label in row.annotation.labels)
                if -1 not in label_ids:
                    labelled.append(self._with_ids(row, label_ids, vocabulary))
                    continue
                unknown = row.annotation.labels[label_ids.index(-1)]
            yield rejected(self._unknown_label(row, unknown, vocabulary))
        if labelled:
            yield labelled

    @staticmethod
    def _unknown_label(row: ManifestRow, label: str, vocabulary: Vocabulary) -> ErrorRow:
        if vocabulary.listed_in:
            return ErrorRow.for_row(row, STAGE, f"label {label!r} is not in --label_file {vocabulary.listed_in}",
                                    "add it to the file, or correct the row's label")
        return ErrorRow.for_row(row, STAGE, f"label {label!r} does not appear in the training split",
                                "label ids come from the training split; add training examples of it")

    @staticmethod
    def _with_ids(row: ManifestRow, label_ids: tuple[int, ...], vocabulary: Vocabulary) -> ManifestRow:
        annotation = row.annotation
        if not annotation.boxes:  # multi_label: the labels in id order
            label_ids = tuple(sorted(label_ids))
            annotation = dataclasses.replace(annotation, labels=tuple(vocabulary.labels[i] for i in label_ids))
        stratum = placing_label_id(label_ids, vocabulary.image_counts)
        return row.replaced(label=vocabulary.labels[stratum], label_id=stratum,
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
        labelled = rows | "AttachLabelId" >> beam.ParDo(
            AttachLabelIdFn(), beam.pvalue.AsSingleton(self._vocabulary)
        ).with_outputs(ERRORS, main="rows")
        of_batches(labelled.rows)
        return labelled


def write_label_transform_fn(vocabulary: Vocabulary, files_dir: str, lock: LockGuard | None = None) -> str:
    """Writes transform_fn/ and transformed_metadata/ for the vocabulary into the build's folder (no
    TensorFlow: shardsmith/format/transform_fn.py); returns `files_dir`. With `lock`, checks first that the
    build still holds the folder: writing recreates a folder that a new holder removed."""
    if lock is not None:
        lock.check()
    return write_transform_fn(vocabulary.labels, files_dir)


class AnalyzeLabels(beam.PTransform):
    """The one-element vocabulary -> transform_fn/ and transformed_metadata/ written into the target's build
    folder (a one-element PCollection of that folder once done), as soon as the vocabulary is known: milliseconds
    of work, which does not grow with the dataset. The transform maps each label to its id in the records
    (labels.txt's line) and any other string to -1."""

    def __init__(self, target: BuildTarget):
        super().__init__()
        self._files_dir = target.files_dir
        self._lock = target.lock  # checked before transform_fn is written

    def expand(self, vocabulary):
        return vocabulary | "WriteTransformFn" >> beam.Map(write_label_transform_fn, self._files_dir, self._lock)
