"""Rows cross stage boundaries as whole batches, and Beam's size sampling does not pickle them
(transforms/row_coder.py): counted on a real build, in this process, by the pickles of each ManifestRow."""

from __future__ import annotations

import dataclasses
import pickle
import zlib
from collections import Counter

from shardsmith import rows
from shardsmith.rows import Annotation, ImageDigest, ImageDigests, ManifestRow, PlacedRow, RowBatch, SealedBatch
from transforms import read_manifest
from transforms.row_coder import ImageDigestsCoder, RowBatchCoder, SealedBatchCoder


def _row(line: int) -> ManifestRow:
    return ManifestRow("/m.csv", 0, line, f"img/{line}.jpg", f"/img/{line}.jpg", "train", "cat", 10)


def _counting_pickles(monkeypatch) -> Counter:
    """Counts, by line, each ManifestRow's pickles: its own, and its values' in a batch's pickle."""
    counts: Counter = Counter()
    reduce, values = ManifestRow.__reduce__, rows.ROW_VALUES[ManifestRow]

    def counted(row):
        counts[row.line] += 1
        return reduce(row)

    def counted_values(row):
        counts[row.line] += 1
        return values(row)

    monkeypatch.setattr(ManifestRow, "__reduce__", counted)
    monkeypatch.setitem(rows.ROW_VALUES, ManifestRow, counted_values)
    return counts


def test_a_batch_round_trips_in_one_pickle_and_its_size_is_estimated_from_one_row(monkeypatch):
    batch = RowBatch(_row(line) for line in range(1, 101))
    coder = RowBatchCoder()
    decoded = coder.decode(coder.encode(batch))
    assert type(decoded) is RowBatch and decoded == batch
    counts = _counting_pickles(monkeypatch)
    estimate = coder.estimate_size(batch)
    assert sum(counts.values()) == 1, "the estimate pickles the first row only"
    assert 0.5 < estimate / len(pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL)) < 3  # before compression
    assert pickle.loads(zlib.decompress(coder.encode(batch))) == batch
    digests = ImageDigests([ImageDigest("ab" * 32, "train", "a.jpg", 0, 1)])
    assert type(ImageDigestsCoder().decode(ImageDigestsCoder().encode(digests))) is ImageDigests


def test_a_batch_pickles_as_its_rows_values_and_comes_back_equal_whatever_it_holds(monkeypatch):
    """Placed rows, rows with annotations, digests, an empty batch and a batch of mixed items all round-trip, as
    the same types; a batch of one kind of row pickles as plain tuples, not one reduce call per row."""
    annotated = ManifestRow("/m.csv", 0, 7, "a.jpg", "/a.jpg", "train", "cat,dog", 10, 2,
                            Annotation(labels=("cat", "dog"), lines=(7,), label_ids=(0, 1), features=(("w", 1.5),)))
    placed = RowBatch(PlacedRow(row, line % 3, 3, (line * 7919, 0, line))
                      for line, row in enumerate([_row(1), annotated, _row(3)]))
    digests = ImageDigests(ImageDigest(f"{line:064x}", "test", f"{line}.jpg", 1, line) for line in range(5))
    coder = RowBatchCoder()
    for batch in (placed, RowBatch([_row(1), annotated]), RowBatch(), RowBatch([_row(1), placed[0]]), digests):
        decoded = coder.decode(coder.encode(batch))
        assert type(decoded) is type(batch) and decoded == batch
        assert [type(item) for item in decoded] == [type(item) for item in batch]

    def reduced_alone(row):
        raise AssertionError(f"line {row.line} was pickled on its own")

    monkeypatch.setattr(ManifestRow, "__reduce__", reduced_alone)
    monkeypatch.setattr(PlacedRow, "__reduce__", reduced_alone)
    assert coder.decode(coder.encode(placed)) == placed


def test_a_build_pickles_each_row_a_few_times_however_many_batches_it_has(shardsmith, label_sorted_set, tmp_path,
                                                                          monkeypatch):
    """285 rows in batches of 8 (36 batches, so Beam samples the size of most elements of every stage's output),
    written in this process: a row is pickled where its batch crosses a stage boundary (where the labels are
    counted, the rank groups, the shards: 3 times), and a batch's first row where the batch's size is sampled.
    Before RowBatchCoder, and before the label ids were attached in the stage that keys the rank groups: 9 to 16
    pickles a row, 13 in the median; with the fan-out after reading, which a run in one process skips, 4."""
    monkeypatch.setattr(read_manifest, "ROWS_PER_BATCH", 8)
    counts = _counting_pickles(monkeypatch)
    result = shardsmith("build", "--manifest", label_sorted_set.manifest, "--output_dir", tmp_path / "out",
                        "--name", "pets", "--writer_processes", "0")
    assert result.code == 0, result.err
    per_row = sorted(counts.values())
    assert len(per_row) == len(label_sorted_set.rows)
    assert per_row[len(per_row) // 2] <= 3, Counter(per_row)
    assert sum(per_row) <= 6 * len(per_row), Counter(per_row)


def test_replaced_is_dataclasses_replace_for_every_field():
    row = ManifestRow("/m.csv", 2, 9, "a.jpg", "/a.jpg", "train", "cat", 10, 1, Annotation(labels=("cat",)))
    new_values = {"source": "/n.csv", "source_index": 3, "line": 4, "uri": "b.jpg", "resolved_uri": "/b.jpg",
                  "split": "test", "label": "dog", "size": 11, "label_id": 2, "annotation": None}
    assert set(new_values) == set(ManifestRow.__match_args__), "a new field needs a value here"
    for name, value in new_values.items():
        assert row.replaced(**{name: value}) == dataclasses.replace(row, **{name: value})
    assert row.replaced(**new_values) == ManifestRow(**new_values)
    assert row.replaced() == row


def test_a_shards_placed_rows_stay_pickled_from_placement_to_the_writer(monkeypatch):
    """SealedBatchCoder encodes a RowBatch of placed rows as RowBatchCoder does (its pickle, compressed) behind a count,
    and decodes it into a SealedBatch that unpickles nothing until iterated; pickled again (a writer's job) it
    carries the same bytes, and a writer iterating it gets the rows back."""
    placed = RowBatch(PlacedRow(_row(line), line % 4, 4, (line * 7919, 0, line)) for line in range(1, 51))
    coder = SealedBatchCoder()
    encoded = coder.encode(placed)
    assert encoded[4:] == RowBatchCoder().encode(placed)
    assert zlib.decompress(encoded[4:]) == pickle.dumps(placed, protocol=pickle.HIGHEST_PROTOCOL)
    assert len(encoded) < len(pickle.dumps(placed, protocol=pickle.HIGHEST_PROTOCOL)) / 2

    def no_rows_unpickled(*args):
        raise AssertionError("a placed row was unpickled")

    monkeypatch.setattr(rows, "_unpickled_rows", no_rows_unpickled)
    sealed = coder.decode(encoded)
    assert type(sealed) is SealedBatch and len(sealed) == 50
    job = pickle.loads(pickle.dumps(("config", "train", 0, [sealed]), protocol=pickle.HIGHEST_PROTOCOL))
    assert coder.encode(sealed) == encoded and coder.encode(job[3][0]) == encoded
    assert 0.5 < coder.estimate_size(sealed) / len(encoded) <= 1
    monkeypatch.undo()
    assert list(job[3][0]) == placed and type(job[3][0].rows()) is RowBatch
    assert len(SealedBatch.of(RowBatch())) == 0 and list(SealedBatch.of(RowBatch())) == []
