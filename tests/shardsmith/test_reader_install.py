"""The readers without the build stack (issue 56 item 4): in .venv-readers (`bash launch.sh readers-env`: shardsmith
installed without its dependencies, then pyproject.toml's `readers` and `torch` extras), `shardsmith.records`,
`shardsmith.torch`'s datasets (with DataLoader worker processes) and `ElasticSampler` read a real build, and Beam,
TensorFlow and tf.transform are not even installed there. CI makes the virtualenv (.ci/run); elsewhere the test
says how to make it and skips."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import shardsmith

ROOT = Path(__file__).resolve().parents[2]
KEY = "image/key/sha256"

SCRIPT = r'''
import json, sys, time
started = time.perf_counter()
import shardsmith
from shardsmith.torch import ElasticSampler, ShardDataset, StreamingShardDataset
imported = time.perf_counter() - started
import importlib.util
from torch.utils.data import DataLoader

out = sys.argv[1]
records = shardsmith.records(out, "train")
streamed = [key for batch in DataLoader(StreamingShardDataset(out, "train", features=True, image_size=8), batch_size=4,
                                        num_workers=2) for key in batch["image/key/sha256"]]
dataset = ShardDataset(out, "train", image_size=8)
sampler = ElasticSampler(dataset, seed=1)
image, label = dataset[next(iter(sampler))]
print("RESULT " + json.dumps({
    "records": [records[i]["image/key/sha256"].hex() for i in range(len(records))],
    "streamed": [key.encode().hex() for key in streamed],
    "image": list(image.shape), "label": int(label),
    "installed": [name for name in ("tensorflow", "apache_beam", "tensorflow_transform")
                  if importlib.util.find_spec(name) is not None],
    "imported": [name for name in ("tensorflow", "apache_beam") if name in sys.modules],
    "import_s": imported}))
'''


def test_the_readers_read_a_build_without_beam_tensorflow_or_tf_transform_installed(built, tmp_path, side_venv):
    python = side_venv("SHARDSMITH_READERS_VENV", ".venv-readers", "readers-env")
    script = tmp_path / "read.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "SHARDSMITH_"))}
    done = subprocess.run([str(python), str(script), str(built)], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.split("RESULT ", 1)[1])
    assert result["installed"] == [] and result["imported"] == []
    want = [record[KEY].hex() for record in shardsmith.records(built, "train")]
    assert result["records"] == want
    assert sorted(result["streamed"]) == sorted(want), "two worker processes: every record once"
    assert result["image"] == [3, 8, 8]
