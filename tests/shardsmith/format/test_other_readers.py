"""Readers we do not ship read our shards with the index files the build writes: the `tfrecord` package (its
PyTorch datasets need index files for sharded and multi-file reads). NVIDIA DALI's readers.tfrecord takes the
same index format, but DALI has no CPU-only wheel to test here (docs/format.md#index-files).

The `tfrecord` package registers its own copy of TensorFlow's Example protos in protobuf's default pool, so a
process that has imported it cannot import TensorFlow afterwards ("duplicate symbol 'tensorflow.BytesList'"):
it runs in a fresh interpreter of its own, never in the test process (which builds with TensorFlow)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import shardsmith
from shardsmith.output_folder.layout import published_dir

pytestmark = pytest.mark.skipif(importlib.util.find_spec("tfrecord") is None, reason="the tfrecord package")

# Run in its own interpreter: prints the (image/key/sha256, label) of every record each reader gave, as JSON.
READ_WITH_TFRECORD = """
import json, sys
from tfrecord.reader import tfrecord_loader
from tfrecord.torch.dataset import MultiTFRecordDataset

folder, files, one = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
keys = {"image/key/sha256": "byte", "image/class/label": "int"}

def found(examples):
    return [[bytes(e["image/key/sha256"]).decode(), int(e["image/class/label"][0])] for e in examples]

every = MultiTFRecordDataset(folder + "/{}", folder + "/{}.idx", {f: 1.0 for f in files}, keys, infinite=False)
path = f"{folder}/{one}"
halves = [found(tfrecord_loader(path, path + ".idx", keys, shard=(i, 2))) for i in (0, 1)]  # as 2 workers
print(json.dumps({"every": found(every), "halves": halves, "whole": found(tfrecord_loader(path, None, keys))}))
"""


def _pairs(items) -> Counter:
    return Counter(map(tuple, items))


def test_the_tfrecord_package_reads_our_shards_through_our_index_files(built):
    metadata = json.loads((built / "metadata.json").read_text())
    files = [shard["file"] for shard in metadata["splits"]["train"]["shards"]]
    one = metadata["splits"]["validation"]["shards"][0]
    done = subprocess.run([sys.executable, "-c", READ_WITH_TFRECORD, published_dir(built), json.dumps(files),
                           one["file"]], capture_output=True, text=True, timeout=300, cwd=Path(__file__).parent)
    assert done.returncode == 0, done.stderr[-2000:]
    read = json.loads(done.stdout)
    expected = Counter((r["image/key/sha256"].decode(), r["image/class/label"])
                       for r in shardsmith.records(built, "train"))
    assert _pairs(read["every"]) == expected, "MultiTFRecordDataset: every record once"
    first, second = (_pairs(half) for half in read["halves"])
    assert sum(first.values()) + sum(second.values()) == one["num_examples"] and not set(first) & set(second)
    assert first + second == _pairs(read["whole"]), "the index splits one shard between two workers"
