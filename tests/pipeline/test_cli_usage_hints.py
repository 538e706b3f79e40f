"""Small usage mistakes get one line saying what to do, before any work: a misspelt command, an output folder in
a scheme shardsmith cannot write, a dataset name too long for its file names, a stray file in the output folder;
every build flag has help text; the summary stays readable with thousands of labels."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.options.flags import build_flags
from shardsmith.format.metadata_schema import Metadata
from shardsmith.read.summary import build_summary

ROOT = Path(__file__).resolve().parents[2]


def _build_args(manifest, out, name: str = "x") -> list:
    return ["build", "--manifest", manifest, "--output_dir", out, "--name", name]


def test_a_misspelt_command_suggests_the_closest_one(shardsmith):
    result = shardsmith("buld", "--manifest", "m.csv")
    assert result.code == 2
    assert result.err.strip() == ("shardsmith: error: unknown command 'buld' (did you mean build?); "
                                  "`shardsmith --help` lists the commands")


@pytest.mark.parametrize("flag", ["--output_dir", "--temp_dir"])
def test_an_output_folder_in_an_unknown_scheme_is_a_usage_error(flag, label_sorted_set, shardsmith, tmp_path):
    args = {"--output_dir": str(tmp_path / "o"), flag: "x://y"}
    result = shardsmith("build", "--manifest", label_sorted_set.manifest, "--name", "x",
                        *[item for pair in args.items() for item in pair])
    assert result.code == 2, result.err
    assert result.err.strip() == (f"shardsmith: error: {flag} 'x://y': shardsmith reads and writes local paths "
                                  "and gs://, s3:// URIs only, not x://")
    assert not (tmp_path / "o").exists()


def test_a_name_too_long_for_its_file_names_is_refused_at_once(label_sorted_set, shardsmith, tmp_path):
    from shardsmith.format.naming import NAME_MAX_BYTES, longest_file_name

    longest_name = "n" * (NAME_MAX_BYTES - len(longest_file_name("")))
    assert len(longest_file_name(longest_name).encode()) == NAME_MAX_BYTES
    started = time.monotonic()
    result = shardsmith(*_build_args(label_sorted_set.manifest, tmp_path / "o", "a" * 250))
    assert result.code == 2 and time.monotonic() - started < 2, result.err
    assert result.err.strip() == (f"shardsmith: error: --name is 250 bytes long; the build's longest file name "
                                  f"({longest_file_name('<name>')}) must fit the file system's limit of "
                                  f"{NAME_MAX_BYTES} bytes, so the name may have at most {len(longest_name)}")
    assert not (tmp_path / "o").exists()
    # One byte shorter passes the check (and fails on the next: a missing manifest, which proves it got there).
    at_limit = shardsmith("build", "--manifest", tmp_path / "none.csv", "--output_dir", tmp_path / "o",
                          "--name", longest_name)
    assert at_limit.code == 2 and "manifest not found" in at_limit.err


def test_the_longest_file_name_is_what_the_writer_makes():
    from shardsmith.format.naming import TEMP_PREFIX, longest_file_name, shard_file_name

    final = shard_file_name("abc", "validation", 0, 1, "gzip")
    assert len(longest_file_name("abc")) >= len(f"{TEMP_PREFIX}{final}.{'0' * 32}")


def test_every_build_flag_has_help_text():
    assert [flag.name for flag in build_flags() if not flag.help] == []


def test_a_stray_file_in_the_output_folder_is_named_with_what_to_do(label_sorted_set, shardsmith, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "README.txt").write_text("mine")
    result = shardsmith(*_build_args(label_sorted_set.manifest, out), "--overwrite")
    assert result.code == 2 and len(result.err.strip().splitlines()) == 1
    assert "move README.txt out of the folder (or choose another --output_dir)" in result.err
    assert (out / "README.txt").read_text() == "mine"
    for i in range(6):
        (out / f"notes{i}.txt").write_text("mine")
    result = shardsmith(*_build_args(label_sorted_set.manifest, out), "--overwrite")
    assert "(README.txt, notes0.txt, notes1.txt, notes2.txt and 3 more)" in result.err
    assert "move these 7 files out of the folder" in result.err


def test_the_summary_of_ten_thousand_labels_is_short():
    labels = [f"label{i:05d}" for i in range(10_000)]
    metadata = {"name": "x", "num_examples": 20_000, "num_errors": 0, "labels": labels, "features": {},
                "splits": {"train": {"num_examples": 20_000, "num_shards": 4, "num_bytes": 10**8,
                                     "label_counts": dict.fromkeys(labels, 2)}}}
    text = build_summary(Metadata.from_json(metadata), "/out", "20260101T000000Z-00000000", 10.0)
    assert max(len(line) for line in text.splitlines()) < 300, text
    train = next(line for line in text.splitlines() if line.lstrip().startswith("train"))
    assert "label00000 2, label00001 2" in train and train.endswith("... and 9,990 more)")


def test_built_in_counts_from_the_process_start(label_sorted_set, tmp_path):
    """The summary's time is the command's wall time (interpreter start and imports included)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", *map(str, _build_args(
        label_sorted_set.manifest, tmp_path / "o")), "--num_shards", "1"], capture_output=True, text=True, env=env)
    wall = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    reported = float(re.search(r"built 'x' in ([0-9.]+) s", done.stdout).group(1))
    # Counted from the command's start, it fell 6.2 s short of the wall on 2 loaded cores, 1.0 s after. Above the
    # wall only by rounding: the summary shows 0.1 s, the process's start is known to a clock tick (10 ms), and
    # 3.98 s of wall has been shown as "4.0 s".
    display_rounding_s, start_tick_s = 0.05, 0.01
    assert wall - 2.5 < reported <= wall + display_rounding_s + start_tick_s, (reported, wall)


def test_load_logs_no_buffer_size_line(tmp_path):
    """TensorFlow logs (at INFO, shown in a notebook that imported TensorFlow first) a tf_record_dataset_op.cc line
    about the read buffer the first time a process reads a TFRecord file, whatever the buffer size; load() must
    not show it. A one-record dataset written here is read with TensorFlow imported first, INFO lines on."""
    code = (
        "import io, json\n"
        "import tensorflow as tf\n"
        "from PIL import Image\n"
        "import shardsmith\n"
        f"out = {str(tmp_path)!r}\n"
        "png = io.BytesIO(); Image.new('RGB', (4, 3)).save(png, 'PNG')\n"
        "feature = {'image/encoded': tf.train.Feature(bytes_list=tf.train.BytesList(value=[png.getvalue()])),\n"
        "           'image/class/label': tf.train.Feature(int64_list=tf.train.Int64List(value=[0]))}\n"
        "name = 'x-train.tfrecord-00000-of-00001'\n"
        "with tf.io.TFRecordWriter(f'{out}/{name}') as writer:\n"
        "    writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())\n"
        "size = tf.io.gfile.stat(f'{out}/{name}').length\n"
        "metadata = {'name': 'x', 'labels': ['a'], 'features': {'image/encoded': 'bytes', 'image/class/label': "
        "'int64'}, 'num_examples': 1, 'splits': {'train': {'num_examples': 1, 'num_bytes': size, 'label_counts': "
        "{'a': 1}, 'shards': [{'file': name, 'num_bytes': size, 'num_examples': 1, 'label_counts': {'a': 1}}]}}}\n"
        "open(f'{out}/metadata.json', 'w').write(json.dumps(metadata))\n"
        "print([tuple(image.shape) for image, _ in shardsmith.load(out, batch_size=None)])\n"
    )
    env = {key: value for key, value in os.environ.items() if not key.startswith(("TF_CPP", "SHARDSMITH"))}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={**env, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "0"})
    assert done.stdout.strip() == "[(3, 4, 3)]", done.stderr
    assert "cpu_feature_guard" in done.stderr or "I0000" in done.stderr, "INFO lines must be on for this test"
    assert "tf_record_dataset_op" not in done.stderr, done.stderr


@pytest.mark.parametrize("records, shards, hinted", [(5_000, 1, True), (5_000, 2, False), (1_024, 1, False)])
def test_a_training_split_of_one_shard_past_the_shuffle_buffer_gets_a_hint(records, shards, hinted):
    """One shard of more records than load()'s shuffle buffer: the reader has nothing to interleave, so the summary
    says how to give it shards (issue 56: a small dataset at the default 128 MB target is one shard)."""
    metadata = {"name": "x", "num_examples": records, "num_errors": 0, "labels": ["a", "b"], "features": {},
                "splits": {"train": {"num_examples": records, "num_shards": shards, "num_bytes": 10**7,
                                     "label_counts": {"a": records // 2, "b": records - records // 2}}}}
    text = build_summary(Metadata.from_json(metadata), "/out", "20260101T000000Z-00000000", 10.0)
    hints = [line for line in text.splitlines() if line.lstrip().startswith("hint")]
    if hinted:
        assert hints == ["  hint       train is 1 shard of 5,000 records: readers mix only within their shuffle "
                         "buffer (1,024 records in load()); --num_shards train=16 or a smaller --target_shard_mb "
                         "gives them shards to shuffle and interleave"]
    else:
        assert hints == []
