"""`shardsmith.records(out, split)`: a split's records without TensorFlow, the same as tf.data reads them, at
random through the index files and in order by streaming, with every record's checksums checked."""

from __future__ import annotations

import io
import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import shardsmith
from shardsmith.output_folder.layout import published_dir
from shardsmith.read.record_sequence import CorruptRecord

ROOT = Path(__file__).resolve().parents[3]


def test_records_are_the_records_tf_data_reads_in_shard_order(built, read_records):
    records = shardsmith.records(built, "train")
    expected = [record for shard in read_records(built, "train") for record in shard]
    assert len(records) == len(expected) == 225
    streamed = list(records)
    for got, want in zip(streamed, expected, strict=True):
        assert set(got) == set(json.loads((built / "metadata.json").read_text())["features"])
        assert got["image/encoded"] == want["image/encoded"]
        assert got["image/class/label"] == want["image/class/label"]
        assert got["image/class/text"].decode() == want["image/class/text"]
        assert got["image/filename"].decode() == want["image/filename"]
    picks = random.Random(0).sample(range(len(records)), 40)
    assert [records[i]["image/key/sha256"] for i in picks] == [streamed[i]["image/key/sha256"] for i in picks]
    assert records[-1] == streamed[-1] and records[3:6] == streamed[3:6]
    with pytest.raises(IndexError):
        records[225]
    assert records.labels == ["cat", "dog", "emu"]


def test_a_split_alias_a_kept_version_and_bad_arguments(built):
    build_id = json.loads((built / "metadata.json").read_text())["build_id"]
    assert len(shardsmith.records(built, "val")) == 31
    assert len(shardsmith.records(built, "test", version=build_id)) == 29
    with pytest.raises(ValueError, match="split 'nope' is not in this dataset"):
        shardsmith.records(built, "nope")
    with pytest.raises(ValueError, match="is neither a build id .* nor a tag name"):
        shardsmith.records(built, "train", version="../latest")
    with pytest.raises(FileNotFoundError, match="no version or tag 'latest' in .*`shardsmith versions"):
        shardsmith.records(built, "train", version="latest")
    with pytest.raises(FileNotFoundError, match="no version 20200101T000000Z-00000000 in .*`shardsmith versions"):
        shardsmith.records(built, "train", version="20200101T000000Z-00000000")


def test_without_index_files_and_with_gzip_shards_the_records_are_the_same(built, tmp_path, gzip_copy):
    expected = list(shardsmith.records(built, "validation"))
    plain = tmp_path / "plain"
    shutil.copytree(built, plain)
    for index in Path(published_dir(plain)).glob("*.idx"):
        index.unlink()
    packed = gzip_copy(built, tmp_path / "packed")
    for out in (plain, packed):
        records = shardsmith.records(out, "validation")
        assert list(records) == expected
        assert [records[i] for i in (30, 0, 17)] == [expected[i] for i in (30, 0, 17)]


def test_a_damaged_record_raises_naming_the_shard_and_record(built, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(built, out)
    shard = Path(published_dir(out)) / "pets-train.tfrecord-00001-of-00004"
    offset, length = map(int, (shard.parent / (shard.name + ".idx")).read_text().splitlines()[5].split())
    data = bytearray(shard.read_bytes())
    data[offset + length // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    records = shardsmith.records(out, "train")
    at = records.shards[1].start + 5
    assert records[at - 1]["image/encoded"]
    with pytest.raises(CorruptRecord, match="pets-train.tfrecord-00001-of-00004 record 5: record data checksum"):
        records[at]
    with pytest.raises(CorruptRecord, match="record 5: record data checksum mismatch"):
        list(records)


def test_an_index_file_that_does_not_end_where_the_shard_does_is_refused_before_a_read(built, tmp_path):
    """Index files are input: a last record claiming a gigabyte would have the reader ask for it (and allocate it)."""
    out = tmp_path / "out"
    shutil.copytree(built, out)
    index = Path(published_dir(out)) / "pets-train.tfrecord-00001-of-00004.idx"
    lines = index.read_text().splitlines()
    offset, _ = lines[-1].split()
    index.write_text("\n".join([*lines[:-1], f"{offset} {1 << 30}"]) + "\n")
    records = shardsmith.records(out, "train")
    with pytest.raises(CorruptRecord, match="pets-train.tfrecord-00001-of-00004.idx covers .* metadata.json says"):
        records[records.shards[1].start]
    assert records[records.shards[0].start]["image/encoded"], "the other shards' index files still serve"


def test_decode_image_gives_height_width_channels_uint8(built):
    record = shardsmith.records(built, "test")[0]
    image = shardsmith.decode_image(record["image/encoded"])
    assert image.dtype == np.uint8
    assert image.shape == (record["image/height"], record["image/width"], 3)
    assert shardsmith.decode_image(record["image/encoded"], (20, 30), channels=1).shape == (20, 30, 1)


def test_a_shrunk_jpeg_is_decoded_at_reduced_scale_and_stays_close_to_a_full_decode():
    from PIL import Image, ImageFilter

    photo_like = Image.effect_noise((800, 600), 60).filter(ImageFilter.GaussianBlur(3)).convert("RGB")
    encoded = io.BytesIO()
    photo_like.save(encoded, "JPEG", quality=90)
    data = encoded.getvalue()
    for size, channels in (((224, 224), 3), ((100, 150), 1), ((300, 400), 4)):
        fast = shardsmith.decode_image(data, size, channels)
        mode = {1: "L", 3: "RGB", 4: "RGBA"}[channels]
        full = Image.open(io.BytesIO(data)).convert(mode).resize(size[::-1], Image.Resampling.BILINEAR)
        full = np.asarray(full, dtype=np.uint8).reshape(fast.shape)
        assert fast.shape == (*size, channels)
        assert np.abs(fast.astype(int) - full.astype(int)).mean() < 3, size
    opened = Image.open(io.BytesIO(data))
    opened.draft("RGB", (224, 224))
    assert opened.size == (400, 300), "libjpeg's DCT scaling picks 1/2 for 224 from 800x600"


def test_records_import_neither_tensorflow_nor_beam(built):
    code = ("import sys, shardsmith\n"
            f"records = shardsmith.records({str(built)!r}, 'train')\n"
            "assert records[7]['image/encoded'] and sum(1 for _ in records) == 225\n"
            "print(sorted(m for m in ('tensorflow', 'apache_beam') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def _exit_with_open_readers(*outs: str) -> subprocess.CompletedProcess:
    """A script that reads a record at random and leaves an iteration open in each dataset, then exits. Beam is
    imported, as a gs:// read imports it: the readers then outlive the module globals at interpreter exit."""
    code = ("import apache_beam, shardsmith\n"
            "kept = []\n"
            f"for out in {list(outs)!r}:\n"
            "    records = shardsmith.records(out, 'train')\n"
            "    it = iter(records)\n"
            "    kept.append((records, records[1], next(it)))\n"
            "print('read', len(kept))\n")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_readers_left_open_at_interpreter_exit_close_quietly(built, tmp_path, gzip_copy):
    done = _exit_with_open_readers(str(built), str(gzip_copy(built, tmp_path / "packed")))
    assert done.returncode == 0 and done.stdout == "read 2\n", done.stderr[-2000:]
    assert "Exception ignored" not in done.stderr, done.stderr[-2000:]


def test_readers_of_gs_datasets_left_open_at_interpreter_exit_close_quietly(built, tmp_path, gzip_copy, gcs_bucket):
    bucket = gcs_bucket.client.bucket(gcs_bucket.name)
    for name, out in (("plain", built), ("packed", gzip_copy(built, tmp_path / "packed"))):
        for path in out.rglob("*"):
            if path.is_file():
                bucket.blob(f"{name}/{path.relative_to(out)}").upload_from_filename(str(path))
    done = _exit_with_open_readers(f"gs://{gcs_bucket.name}/plain", f"gs://{gcs_bucket.name}/packed")
    assert done.returncode == 0 and done.stdout == "read 2\n", done.stderr[-2000:]
    assert "Exception ignored" not in done.stderr, done.stderr[-2000:]


def test_an_index_must_be_an_integer_and_an_out_of_range_one_is_named_as_given(built):
    """An int (numpy's too) or a slice; a bool (a mask's element, not a position), a float or a string is a
    TypeError naming its type, never taken as 0 or 1, truncated or parsed into some other record."""
    records = shardsmith.records(built, "validation")
    assert records[np.int64(3)] == records[3] and records[-1] == records[30]
    for index, kind in ((1.7, "float"), ("3", "str"), (np.float64(2.0), "float64"), (None, "NoneType"),
                        (True, "bool"), (False, "bool"), (np.bool_(True), "bool")):
        with pytest.raises(TypeError, match=f"record indices must be integers or slices, not {kind}$"):
            records[index]
    for index in (31, -32, 10**20):
        with pytest.raises(IndexError, match=f"^record {index} is out of range for a split of 31 records$"):
            records[index]
