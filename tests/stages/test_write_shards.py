"""transforms/write_shards.py: TFRecord framing read back by tf.data, shard names, and WriteShards in a
TestPipeline (FnApiRunner) over real image files: order, errors, results, digests, no temporary files left."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import pickle
import random
import subprocess
import sys
from pathlib import Path

import apache_beam as beam
import google_crc32c
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that
from PIL import Image

from shardsmith.format.example import EXAMPLE_KEYS
from shardsmith.format.naming import TEMP_PREFIX, shard_file_name
from shardsmith.format.tfrecord import frame
from shardsmith.rows import ErrorRow, ImageDigest, ManifestRow, PlacedRow, ShardResult
from shardsmith.settings import RecordSettings
from shardsmith.shard_writer.shard_file import write_shard_file
from shardsmith.shard_writer.writer_config import UnlockedFolder, WriterConfig
from transforms.place import ShardPlan, SplitPlan
from transforms.write_shards import SMALL_BUILD_BYTES, SMALL_BUILD_IMAGES, WriteShardFn, WriteShards


def _framed(records: list[bytes]) -> bytes:
    out = b""
    for record in records:
        head, tail = frame(record)
        out += head + record + tail
    return out


RECORDS = [b"", b"x", b"hello tfrecord", bytes(range(256)) * 400, random.Random(0).randbytes(70_001)]


def test_shard_file_names():
    assert shard_file_name("pets", "train", 0, 4, "none") == "pets-train.tfrecord-00000-of-00004"
    assert shard_file_name("pets", "validation", 3, 4, "none") == "pets-validation.tfrecord-00003-of-00004"
    assert shard_file_name("pets", "test", 12, 100_000, "gzip") == "pets-test.tfrecord-00012-of-100000.gz"


def test_framing_is_byte_identical_to_tensorflows_writer(tmp_path, tf):
    path = tmp_path / "tf.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in RECORDS:
            writer.write(record)
    assert _framed(RECORDS) == path.read_bytes()


@pytest.mark.parametrize("compression", ["", "GZIP"])
def test_framed_records_read_back_with_tf_data(tmp_path, tf, compression):
    path = tmp_path / "ours.tfrecord"
    data = _framed(RECORDS)
    path.write_bytes(gzip.compress(data) if compression else data)
    read = [r.numpy() for r in tf.data.TFRecordDataset(str(path), compression_type=compression)]
    assert read == RECORDS


def test_a_corrupted_frame_is_detected_by_tf_data(tmp_path, tf):
    data = bytearray(_framed([b"abcdef"]))
    data[12] ^= 0xFF  # first payload byte: the data CRC no longer matches
    path = tmp_path / "bad.tfrecord"
    path.write_bytes(bytes(data))
    with pytest.raises(tf.errors.DataLossError):
        list(tf.data.TFRecordDataset(str(path)))


# WriteShards in a pipeline ---------------------------------------------------------------------------------


def _dump_to(path: str):
    """An assert_that matcher that stores what the pipeline produced, for plain asserts after the run."""

    def dump(actual):
        Path(path).write_bytes(pickle.dumps(list(actual)))

    return dump


def _load(path: Path) -> list:
    return pickle.loads(path.read_bytes())


def _image_bytes(kind: str, seed: int) -> bytes:
    rng = random.Random(seed)
    size = (rng.randrange(8, 40), rng.randrange(8, 40))
    image = Image.new("RGB", size, tuple(rng.randrange(256) for _ in range(3)))
    image.putpixel((1, 1), (255, 255, 255))
    out = io.BytesIO()
    if kind == "jpeg":
        image.save(out, "JPEG", quality=90)
    elif kind == "grey-png":
        image.convert("L").save(out, "PNG")
    else:
        image.save(out, "PNG")
    return out.getvalue()


def _placed(root: Path, name: str, data: bytes | None, label: str, line: int, shard: int, order: int):
    path = root / "img" / name
    if data is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    row = ManifestRow(str(root / "m.csv"), 0, line, f"img/{name}", str(path), "train", label, -1,
                      {"cat": 0, "dog": 1}[label])
    return PlacedRow(row, shard, 2, (order, 0, line))


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_write_shards_pipeline(tmp_path, tf, compression):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    files = {
        "a.jpg": _image_bytes("jpeg", 1),
        "b.png": _image_bytes("png", 2),
        "c.png": _image_bytes("grey-png", 3),
        "d.jpg": _image_bytes("jpeg", 4),
        "e.jpg": _image_bytes("jpeg", 5),
    }
    noise = Image.frombytes("RGB", (64, 64), random.Random(6).randbytes(64 * 64 * 3))
    jpeg = io.BytesIO()
    noise.save(jpeg, "JPEG", quality=95)
    truncated = jpeg.getvalue()[: len(jpeg.getvalue()) * 3 // 4]  # header intact, pixels cut
    # Shard 0 arrives out of order (order keys 30, 10, 50, 20, 40); shard 1 holds one image.
    shard0 = [
        _placed(tmp_path, "a.jpg", files["a.jpg"], "cat", 2, 0, 30),
        _placed(tmp_path, "b.png", files["b.png"], "dog", 3, 0, 10),
        _placed(tmp_path, "broken.jpg", truncated, "cat", 4, 0, 50),
        _placed(tmp_path, "missing.jpg", None, "dog", 5, 0, 20),
        _placed(tmp_path, "c.png", files["c.png"], "cat", 6, 0, 40),
        _placed(tmp_path, "d.jpg", files["d.jpg"], "cat", 7, 0, 5),
    ]
    shard1 = [_placed(tmp_path, "e.jpg", files["e.jpg"], "dog", 8, 1, 1)]
    config = WriterConfig(UnlockedFolder(str(out_dir)), "pets",
                          RecordSettings(validate="decode", compression=compression))
    with test_pipeline.TestPipeline(runner=FnApiRunner()) as p:
        written = (
            p
            | beam.Create([(("train", 0), [shard0[:2], shard0[2:]]), (("train", 1), [shard1])])
            | WriteShards(config)
        )
        assert_that(written.shards, _dump_to(str(tmp_path / "shards.pkl")), label="Shards")
        assert_that(written.errors, _dump_to(str(tmp_path / "errors.pkl")), label="Errors")
        assert_that(written.digests, _dump_to(str(tmp_path / "digests.pkl")), label="Digests")

    suffix = ".gz" if compression == "gzip" else ""
    names = [f"pets-train.tfrecord-0000{i}-of-00002{suffix}" for i in (0, 1)]
    indexes = [None, None] if compression == "gzip" else [f"{name}.idx" for name in names]  # gzip: no index
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(names + [i for i in indexes if i])  # no temporary
    assert not any(p.name.startswith(TEMP_PREFIX) for p in out_dir.iterdir())

    results = sorted(_load(tmp_path / "shards.pkl"), key=lambda r: r.shard)
    assert [r.crc32c for r in results] == [f"{google_crc32c.value((out_dir / name).read_bytes()):08x}"
                                           for name in names]
    assert [dataclasses.replace(r, crc32c="", first_key=None) for r in results] == [
        ShardResult("train", 0, 2, names[0], 4, (out_dir / names[0]).stat().st_size, {"cat": 3, "dog": 1}, 4,
                    index_file=indexes[0]),
        ShardResult("train", 1, 2, names[1], 1, (out_dir / names[1]).stat().st_size, {"dog": 1}, 1,
                    index_file=indexes[1]),
    ]

    errors = sorted(_load(tmp_path / "errors.pkl"), key=ErrorRow.sort_key)
    assert [(e.line, e.uri, e.stage, e.label) for e in errors] == [
        (4, "img/broken.jpg", "load", "cat"), (5, "img/missing.jpg", "load", "dog")]
    assert "truncated or corrupt" in errors[0].reason
    assert errors[1].reason == "file cannot be read" and "FileNotFoundError" in errors[1].detail

    digest_lists = _load(tmp_path / "digests.pkl")
    assert len(digest_lists) == 2  # one list per shard
    digests = sorted((d for digests in digest_lists for d in digests), key=lambda d: d.line)
    expected_digests = [
        ImageDigest(hashlib.sha256(files[name]).hexdigest(), "train", f"img/{name}", 0, line)
        for name, line in [("a.jpg", 2), ("b.png", 3), ("c.png", 6), ("d.jpg", 7), ("e.jpg", 8)]
    ]
    assert digests == expected_digests

    dtypes = {"bytes": tf.string, "int64": tf.int64}
    spec = {key: tf.io.FixedLenFeature([], dtypes[kind]) for key, kind in EXAMPLE_KEYS.items()}
    tf_compression = "GZIP" if compression == "gzip" else ""
    if compression == "gzip":
        assert (out_dir / names[0]).read_bytes()[:2] == b"\x1f\x8b"

    def read(name: str) -> list[dict]:
        dataset = tf.data.TFRecordDataset(str(out_dir / name), compression_type=tf_compression)
        return [{k: v.numpy() for k, v in tf.io.parse_single_example(r, spec).items()} for r in dataset]

    shard0_records = read(names[0])
    # Sorted by order key: d (5), b (10), a (30), c (40); the two rejected rows are absent.
    assert [r["image/filename"] for r in shard0_records] == [b"img/d.jpg", b"img/b.png", b"img/a.jpg",
                                                            b"img/c.png"]
    assert [r["image/class/label"] for r in shard0_records] == [0, 1, 0, 0]
    assert [r["image/class/text"] for r in shard0_records] == [b"cat", b"dog", b"cat", b"cat"]
    for record in shard0_records + read(names[1]):
        name = record["image/filename"].decode().split("/")[-1]
        assert record["image/encoded"] == files[name]
        assert record["image/key/sha256"] == hashlib.sha256(files[name]).hexdigest().encode()
        decoded = tf.io.decode_image(record["image/encoded"], expand_animations=False)
        shape = (record["image/height"], record["image/width"], record["image/channels"])
        assert tuple(decoded.shape) == shape
    assert [r["image/channels"] for r in shard0_records] == [3, 3, 3, 1]
    assert [r["image/filename"] for r in read(names[1])] == [b"img/e.jpg"]


def test_rewriting_a_shard_gives_identical_bytes(tmp_path):
    """A retried bundle renames identical bytes over the same final name."""
    data = _image_bytes("jpeg", 9)
    rows = [_placed(tmp_path, f"{i}.jpg", data, "cat", i, 0, 100 - i) for i in range(5)]
    contents = []
    for attempt in range(2):
        out_dir = tmp_path / f"out{attempt}"
        out_dir.mkdir()
        with test_pipeline.TestPipeline(runner=FnApiRunner()) as p:
            _ = p | beam.Create([(("test", 0), [rows])]) | WriteShards(WriterConfig(UnlockedFolder(str(out_dir)), "x"))
        contents.append((out_dir / "x-test.tfrecord-00000-of-00002").read_bytes())
    assert contents[0] == contents[1]
    assert len(contents[0]) > 5 * len(data)


def test_the_shard_writer_processes_import_neither_beam_nor_tensorflow():
    """Each local writer process costs tens of MB because of this; importing either would cost 0.2-0.7 GB."""
    probe = ("import sys, shardsmith.shard_writer.shard_worker, shardsmith.shard_writer.shard_file; "
             "print(sorted(m for m in ('apache_beam', 'tensorflow') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.stdout.strip() == "[]"


def test_a_writer_process_killed_between_shards_is_replaced_and_the_next_shard_written(tmp_path):
    from shardsmith.shard_writer.shard_worker import ShardWriterPool

    data = _image_bytes("jpeg", 11)
    rows = [_placed(tmp_path, f"{i}.jpg", data, "cat", i, 0, i) for i in range(3)]
    pool = ShardWriterPool(1)
    try:
        ok = WriterConfig(UnlockedFolder(str(tmp_path)), "ok")
        outcome = pool.submit(write_shard_file, ok, "train", 0, [rows]).result()
        assert outcome.result.num_examples == 3 and not outcome.errors
        pool._workers[0].kill()
        retry = WriterConfig(UnlockedFolder(str(tmp_path)), "again")
        again = pool.submit(write_shard_file, retry, "train", 0, [rows]).result()
    finally:
        pool.close()
    assert again.result.num_examples == 3
    assert (tmp_path / "again-train.tfrecord-00000-of-00002").read_bytes() == \
        (tmp_path / "ok-train.tfrecord-00000-of-00002").read_bytes()


def test_no_more_default_writer_processes_start_than_the_build_has_shards(tmp_path):
    """A writer writes whole shards: one more than the shards would only start and wait."""
    data = _image_bytes("jpeg", 5)
    rows = [_placed(tmp_path, f"{i}.jpg", data, "cat", i, 0, i) for i in range(3)]
    plan = ShardPlan({"train": SplitPlan(2000, SMALL_BUILD_BYTES + 1, 1), "test": SplitPlan(500, 1, 1)}, {})
    (tmp_path / "out").mkdir()
    fn = WriteShardFn(WriterConfig(UnlockedFolder(str(tmp_path / "out")), "x"), processes=3, unless_small=True)
    fn.setup()
    try:
        outputs = [*fn.process((("train", 0), [rows]), plan), *fn.finish_bundle()]
        assert fn._pool.processes == 2
    finally:
        fn.teardown()
    results = [getattr(o, "value", o) for o in outputs]
    assert [r.num_examples for r in results if isinstance(r, ShardResult)] == [3]


def test_writer_processes_take_the_largest_held_back_shard_first_and_the_smallest_last(tmp_path):
    """A shard is one writer's from start to end, so the last shards written may each leave the other writers
    idle: the largest of the held-back shards goes first (one writer process here: its order is the order they
    were handed out), and the smallest seen is written last."""
    data = _image_bytes("jpeg", 5)
    sizes = [2, 5, 1, 4, 3]  # rows per shard, in the order the shards arrive
    (tmp_path / "out").mkdir()
    fn = WriteShardFn(WriterConfig(UnlockedFolder(str(tmp_path / "out")), "x"), processes=1)
    fn.setup()
    try:
        outputs = []
        for shard, size in enumerate(sizes):
            rows = [dataclasses.replace(_placed(tmp_path, f"{shard}-{i}.jpg", data, "cat", i, shard, i),
                                        num_shards=len(sizes)) for i in range(size)]
            outputs += fn.process((("train", shard), [rows]))
        outputs += fn.finish_bundle()
    finally:
        fn.teardown()
    results = [getattr(o, "value", o) for o in outputs]
    assert [r.num_examples for r in results if isinstance(r, ShardResult)] == [5, 4, 3, 2, 1]


@pytest.mark.parametrize("images, source_bytes, started", [
    (SMALL_BUILD_IMAGES, SMALL_BUILD_BYTES, False),  # written in the runner's own process
    (SMALL_BUILD_IMAGES + 1, 1000, True),
    (3, SMALL_BUILD_BYTES + 1, True),
])
def test_the_default_writer_processes_start_only_for_a_build_that_is_not_small(tmp_path, images, source_bytes,
                                                                               started):
    """Starting writer processes costs more than writing a small build; the bytes are the same either way."""
    data = _image_bytes("jpeg", 5)
    rows = [_placed(tmp_path, f"{i}.jpg", data, "cat", i, 0, i) for i in range(3)]
    plan = ShardPlan({"train": SplitPlan(images, source_bytes, 2)}, {})
    (tmp_path / "out").mkdir()
    (tmp_path / "alone").mkdir()
    fn = WriteShardFn(WriterConfig(UnlockedFolder(str(tmp_path / "out")), "x"), processes=1, unless_small=True)
    fn.setup()
    try:
        outputs = [*fn.process((("train", 0), [rows]), plan), *fn.finish_bundle()]
        assert (fn._pool is not None) is started
    finally:
        fn.teardown()
    results = [getattr(o, "value", o) for o in outputs]
    assert [r.num_examples for r in results if isinstance(r, ShardResult)] == [3]
    written = tmp_path / "out" / "x-train.tfrecord-00000-of-00002"
    with test_pipeline.TestPipeline(runner=FnApiRunner()) as p:  # the same shard written by WriteShards alone
        alone = WriterConfig(UnlockedFolder(str(tmp_path / "alone")), "x")
        _ = p | beam.Create([(("train", 0), [rows])]) | WriteShards(alone)
    assert written.read_bytes() == (tmp_path / "alone" / written.name).read_bytes()
