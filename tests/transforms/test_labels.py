"""transforms/labels.py: the vocabulary (training labels in code point order, or all labels when there is no
training split) and label ids attached in a TestPipeline (FnApiRunner)."""

from __future__ import annotations

import dataclasses

import apache_beam as beam
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to

from shardsmith.manifest.label_list import FixedLabels
from shardsmith.rows import Annotation, ManifestRow
from transforms.labels import (
    AttachLabelIds,
    ComputeVocabulary,
    CountLabels,
    Vocabulary,
    _label_counts,
    vocabulary_from,
)


def _row(line: int, split: str, label: str) -> ManifestRow:
    return ManifestRow("/m.csv", 0, line, f"img/{line}.jpg", f"/img/{line}.jpg", split, label, 10)


def test_vocabulary_from_training_rows_only_in_code_point_order():
    counts = [(("train", "dog"), 2), (("test", "zebra"), 1), (("train", "Cat"), 1), (("train", "cat"), 3),
              (("test", "dog"), 5), (("test", "ant"), 1), (("train", "Émeu"), 1), (("train", "_x"), 4)]
    vocabulary = vocabulary_from(counts)
    assert vocabulary == Vocabulary(("Cat", "_x", "cat", "dog", "Émeu"), "train", (1, 4, 3, 2, 1))


def test_vocabulary_falls_back_to_all_rows_without_a_training_split():
    vocabulary = vocabulary_from(iter([(("test", "b"), 1), (("test", "a"), 1), (("test", "b"), 2)]))
    assert vocabulary == Vocabulary(("a", "b"), "all", (1, 3))
    assert vocabulary_from([]) == Vocabulary((), "all")


def _check_errors(expected: list[tuple[int, str, str]]):
    """Matcher on ErrorRows: (line, label, stage) of each, and a reason that names the label."""

    def check(actual):
        got = sorted((e.line, e.label, e.stage) for e in actual)
        assert got == sorted(expected), got
        for error in actual:
            assert repr(error.label) in error.reason and "training split" in error.reason, error
            assert error.uri == f"img/{error.line}.jpg" and error.source == "/m.csv"

    return check


def test_label_ids_in_a_pipeline_and_labels_missing_from_training_become_errors():
    rows = [
        _row(1, "train", "dog"), _row(2, "train", "cat"), _row(3, "validation", "cat"),
        _row(4, "test", "dog"),
        _row(5, "test", "emu"),  # only in test
        _row(6, "validation", "fox"),  # only in validation
        _row(7, "train", "ant"), _row(8, "train", "cat"),
    ]
    ids = {"ant": 0, "cat": 1, "dog": 2}
    expected_rows = [dataclasses.replace(r, label_id=ids[r.label]) for r in rows if r.label in ids]
    with test_pipeline.TestPipeline(runner=FnApiRunner()) as p:
        batches = p | beam.Create([rows[:3], rows[3:]])
        vocabulary = batches | CountLabels() | ComputeVocabulary()
        labelled = batches | AttachLabelIds(vocabulary)
        assert_that(vocabulary, equal_to([Vocabulary(("ant", "cat", "dog"), "train", (1, 2, 1))]), label="Vocabulary")
        assert_that(labelled.rows | beam.FlatMap(lambda batch: batch), equal_to(expected_rows), label="Rows")
        expected_errors = [(5, "emu", "label"), (6, "fox", "label")]
        assert_that(labelled.errors, _check_errors(expected_errors), label="Errors")


def test_without_training_rows_every_row_gets_an_id():
    rows = [_row(1, "test", "b"), _row(2, "validation", "a"), _row(3, "test", "c"), _row(4, "test", "a")]
    ids = {"a": 0, "b": 1, "c": 2}
    with test_pipeline.TestPipeline(runner=FnApiRunner()) as p:
        batches = p | beam.Create([rows])
        vocabulary = batches | CountLabels() | ComputeVocabulary()
        labelled = batches | AttachLabelIds(vocabulary)
        assert_that(vocabulary, equal_to([Vocabulary(("a", "b", "c"), "all", (2, 1, 1))]), label="Vocabulary")
        assert_that(labelled.rows, equal_to([[dataclasses.replace(r, label_id=ids[r.label]) for r in rows]]),
                    label="Rows")
        assert_that(labelled.errors, equal_to([]), label="Errors")


def test_a_fixed_list_keeps_its_order_and_counts_only_rows_it_fully_lists():
    fixed = FixedLabels(("dog", "ant", "yak"), "/labels.txt")
    counts = [(("train", "dog"), 2), (("train", "ant"), 1), (("test", "yak"), 4), (("train", "zebra"), 3)]
    assert vocabulary_from(counts, fixed) == Vocabulary(("dog", "ant", "yak"), "train", (2, 1, 0), "/labels.txt")
    assert vocabulary_from([(("test", "yak"), 4)], fixed) == Vocabulary(fixed.labels, "all", (0, 0, 4),
                                                                         "/labels.txt")
    tagged = dataclasses.replace(_row(1, "train", "dog"), annotation=Annotation(labels=("dog", "zebra")))
    assert list(_label_counts([tagged, _row(2, "train", "ant")], fixed)) == [(("train", "ant"), 1)]


def test_rows_with_unlisted_labels_become_errors_naming_the_file():
    rows = [_row(1, "train", "dog"), _row(2, "train", "cat"), _row(3, "test", "ant")]
    fixed = FixedLabels(("dog", "ant", "emu"), "gs://b/labels.txt")
    with test_pipeline.TestPipeline(runner=FnApiRunner()) as p:
        batches = p | beam.Create([rows])
        labelled = batches | AttachLabelIds(batches | CountLabels(fixed) | ComputeVocabulary(fixed))
        assert_that(labelled.rows, equal_to([[dataclasses.replace(rows[0], label_id=0),
                                              dataclasses.replace(rows[2], label_id=1)]]), label="Rows")
        assert_that(labelled.errors | beam.Map(lambda e: (e.line, e.stage, e.reason)),
                    equal_to([(2, "label", "label 'cat' is not in --label_file gs://b/labels.txt")]), label="Errors")
