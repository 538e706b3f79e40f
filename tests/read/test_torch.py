"""shardsmith.torch with real PyTorch: DataLoader workers and DDP ranks read every record of a real build exactly
once per epoch, DistributedSampler works on the map-style dataset, a model trains a step, and importing the
module loads no TensorFlow."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader, DistributedSampler  # noqa: E402

import shardsmith  # noqa: E402
from shardsmith.torch import ShardDataset, StreamingShardDataset, as_text  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
KEY = "image/key/sha256"


def _ids(built: Path, split: str = "train") -> list[str]:
    """The split's keys, as shardsmith.torch's `features=True` gives text: str."""
    return [record[KEY].decode() for record in shardsmith.records(built, split)]


def _read_ids(dataset, **loader) -> list[str]:
    batches = DataLoader(dataset, batch_size=16, **loader)
    return [key for batch in batches for key in batch[KEY]]


def test_two_dataloader_workers_read_every_record_exactly_once_per_epoch(built):
    expected = Counter(_ids(built))
    dataset = StreamingShardDataset(built, "train", features=True, image_size=8, shuffle_buffer=64)
    orders = []
    for epoch in (0, 1):
        dataset.set_epoch(epoch)
        got = _read_ids(dataset, num_workers=2)
        assert Counter(got) == expected, "each record once, none lost"
        orders.append(got)
    assert orders[0] != orders[1], "the shard order and the buffer shuffle change with the epoch"
    assert len(dataset) == 225


def test_two_ranks_split_the_records_without_overlap_or_loss(built):
    expected = Counter(_ids(built))
    parts = []
    for rank in (0, 1):
        dataset = StreamingShardDataset(built, "train", features=True, image_size=8, rank=rank, world_size=2,
                                        seed=3)
        dataset.set_epoch(5)
        parts.append(Counter(_read_ids(dataset, num_workers=2)))
        assert sum(parts[-1].values()) == len(dataset) in (112, 113)
    assert parts[0] + parts[1] == expected
    assert not set(parts[0]) & set(parts[1])


def test_the_map_style_dataset_reads_records_at_random_and_with_a_distributed_sampler(built):
    records = shardsmith.records(built, "validation")
    dataset = ShardDataset(built, "validation", dtype="float32", image_size=(12, 10))
    image, label = dataset[7]
    assert image.shape == (3, 12, 10) and image.dtype == torch.float32 and 0 <= float(image.min()) <= 1
    assert label == records[7]["image/class/label"]
    plain = ShardDataset(built, "validation", features=True)
    seen = []
    for rank in (0, 1):
        sampler = DistributedSampler(plain, num_replicas=2, rank=rank, shuffle=True, seed=1)
        seen += list(DataLoader(plain, batch_size=None, sampler=sampler, collate_fn=lambda record: record[KEY]))
    assert set(seen) == set(_ids(built, "validation")) and len(seen) == 32, "31 records, padded to 2 x 16"
    assert plain[0]["image"].shape == (3, records[0]["image/height"], records[0]["image/width"])
    assert plain[0]["image"].dtype == torch.uint8
    for index in (True, 1.0, "1"):  # a bool is not an index (records() refuses it the same way)
        with pytest.raises(TypeError, match="record indices must be integers or slices"):
            plain[index]


def test_a_transform_gets_the_pil_image_and_a_training_step_runs(built):
    def to_tensor(image):
        return torch.from_numpy(__import__("numpy").asarray(image, dtype="float32")).permute(2, 0, 1) / 255.0

    dataset = StreamingShardDataset(built, "train", image_size=16, transform=to_tensor)
    images, labels = next(iter(DataLoader(dataset, batch_size=32)))
    assert images.shape == (32, 3, 16, 16) and labels.dtype == torch.int64
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 16 * 16, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    before = [p.detach().clone() for p in model.parameters()]
    loss = torch.nn.functional.cross_entropy(model(images), labels)
    loss.backward()
    optimizer.step()
    assert torch.isfinite(loss)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_a_detection_dataset_asks_for_features(built):
    from shardsmith.torch.samples import Samples

    records = shardsmith.records(built, "test")
    records.metadata.task = "detection"
    with pytest.raises(ValueError, match="pass features=True"):
        Samples(records, None, 3, "uint8", None, None, False)


def test_importing_shardsmith_torch_imports_no_tensorflow():
    code = ("import sys, shardsmith.torch\n"
            "print(sorted(m for m in ('tensorflow', 'apache_beam') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_features_give_text_as_str_and_the_image_bytes_as_bytes(built, tmp_path):
    records = shardsmith.records(built, "validation")
    sample = ShardDataset(built, "validation", features=True)[3]
    for key in ("image/class/text", "image/filename", "image/format", KEY):
        assert sample[key] == records[3][key].decode() and isinstance(sample[key], str), key
    assert isinstance(sample["image/encoded"], bytes) and sample["image/encoded"] == records[3]["image/encoded"]
    batch = next(iter(DataLoader(StreamingShardDataset(built, "validation", features=True, image_size=8),
                                 batch_size=4)))
    assert all(isinstance(text, str) for text in batch["image/class/text"]), "collated as a list of str"
    assert as_text({"t": [b"caf\xc3\xa9", b"\xff"], "n": 3}, ("t",)) == {"t": ["caf\u00e9", "\ufffd"]}, \
        "a list of str; a byte that is not UTF-8 shown, never raised"

