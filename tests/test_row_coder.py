"""Rows cross stage boundaries as whole batches, and Beam's size sampling does not pickle them
(transforms/row_coder.py): counted on a real build, in this process, by the pickles of each ManifestRow."""

from __future__ import annotations

from collections import Counter

from shardsmith.core.rows import ImageDigest, ImageDigests, ManifestRow, RowBatch
from transforms import read_manifest
from transforms.row_coder import ImageDigestsCoder, RowBatchCoder


def _row(line: int) -> ManifestRow:
    return ManifestRow("/m.csv", 0, line, f"img/{line}.jpg", f"/img/{line}.jpg", "train", "cat", 10)


def _counting_pickles(monkeypatch) -> Counter:
    counts: Counter = Counter()
    reduce = ManifestRow.__reduce__

    def counted(row):
        counts[row.line] += 1
        return reduce(row)

    monkeypatch.setattr(ManifestRow, "__reduce__", counted)
    return counts


def test_a_batch_round_trips_in_one_pickle_and_its_size_is_estimated_from_one_row(monkeypatch):
    batch = RowBatch(_row(line) for line in range(1, 101))
    coder = RowBatchCoder()
    decoded = coder.decode(coder.encode(batch))
    assert type(decoded) is RowBatch and decoded == batch
    counts = _counting_pickles(monkeypatch)
    estimate = coder.estimate_size(batch)
    assert sum(counts.values()) == 1, "the estimate pickles the first row only"
    assert 0.5 < estimate / len(coder.encode(batch)) < 3
    digests = ImageDigests([ImageDigest("ab" * 32, "train", "a.jpg", 0, 1)])
    assert type(ImageDigestsCoder().decode(ImageDigestsCoder().encode(digests))) is ImageDigests


def test_a_build_pickles_each_row_a_few_times_however_many_batches_it_has(shardsmith, label_sorted_set, tmp_path,
                                                                          monkeypatch):
    """285 rows in batches of 8 (36 batches, so Beam samples the size of most elements of every stage's output),
    written in this process: a row is pickled where its batch crosses a stage boundary (the fan-out after
    reading, the rank groups, the shards: 4 times), and a batch's first row where the batch's size is sampled.
    Before RowBatchCoder, and before the label ids were attached in the stage that keys the rank groups: 9 to 16
    pickles a row, 13 in the median."""
    monkeypatch.setattr(read_manifest, "ROWS_PER_BATCH", 8)
    counts = _counting_pickles(monkeypatch)
    result = shardsmith("build", "--manifest", label_sorted_set.manifest, "--output_dir", tmp_path / "out",
                        "--name", "pets", "--writer_processes", "0")
    assert result.code == 0, result.err
    per_row = sorted(counts.values())
    assert len(per_row) == len(label_sorted_set.rows)
    assert per_row[len(per_row) // 2] <= 4, Counter(per_row)
    assert sum(per_row) <= 6 * len(per_row), Counter(per_row)
