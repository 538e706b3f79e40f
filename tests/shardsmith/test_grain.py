"""shardsmith.grain with real Grain: the source is a RandomAccessDataSource over a real build, picklable for
Grain's workers, and its shuffled, batched MapDataset holds every record of the split once per epoch."""

from __future__ import annotations

import pickle
from collections import Counter

import numpy as np
import pytest

import shardsmith
from shardsmith.grain import ShardSource, dataset

grain = pytest.importorskip("grain")


def test_the_source_is_a_random_access_data_source_of_the_split(built):
    records = shardsmith.records(built, "validation")
    source = ShardSource(built, "validation", image_size=(10, 12))
    assert isinstance(source, grain.sources.RandomAccessDataSource)
    assert len(source) == len(records) == 31
    item = source[30]
    assert item["image"].shape == (10, 12, 3) and item["image"].dtype == np.uint8
    assert item["label"] == records[30]["image/class/label"]
    again = pickle.loads(pickle.dumps(source))
    assert np.array_equal(again[30]["image"], item["image"]) and "validation" in repr(again)
    full = ShardSource(built, "validation", features=True)[0]
    assert full["image"].shape == (full["image/height"], full["image/width"], 3)


def test_the_dataset_shuffles_and_batches_every_record_once(built):
    labels = Counter(r["image/class/label"] for r in shardsmith.records(built, "train"))
    batches = list(dataset(built, "train", seed=4, batch_size=32, image_size=16))
    assert [b["image"].shape for b in batches[:1]] == [(32, 16, 16, 3)] and len(batches) == 8
    assert Counter(int(label) for b in batches for label in b["label"]) == labels
    in_order = [r["image/class/label"] for r in shardsmith.records(built, "train")][:32]
    assert list(batches[0]["label"]) != in_order, "shuffled across the split, not read in shard order"
