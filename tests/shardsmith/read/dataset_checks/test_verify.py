"""`shardsmith verify`: passes on a real build, and fails, naming the reason, on copies of it with one defect."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest

from shardsmith.format.example import example_class
from shardsmith.format.tfrecord import READ_CHUNK, frame, iter_records
from shardsmith.output_folder.layout import published_dir
from shardsmith.read.dataset_checks import verify

SHARD = "pets-train.tfrecord-00000-of-00004"


@pytest.fixture
def copy(built, tmp_path) -> Path:
    """The published build's own folder, copied: it reads as a dataset by itself (its metadata.json says so)."""
    target = tmp_path / "copy"
    shutil.copytree(published_dir(built), target)
    return target


def _verdict(result) -> str:
    return result.out.strip().splitlines()[-1]


def _rewrite_record(path: Path, index: int, change) -> None:
    """Re-frames the shard (with correct CRCs) after change(example) edits record `index`."""
    with path.open("rb") as f:
        records = list(iter_records(f))
    example = example_class().FromString(records[index])
    change(example.features.feature)
    records[index] = example.SerializeToString(deterministic=True)
    out = bytearray()
    for record in records:
        head, tail = frame(record)
        out += head + record + tail
    path.write_bytes(bytes(out))


def test_a_good_build_passes_and_every_image_is_decoded(built, shardsmith):
    result = shardsmith("verify", built)
    assert result.code == 0, result.out + result.err
    verdict = _verdict(result)
    assert verdict.startswith("shardsmith verify: OK: 285 of 285 records in 8 shards")
    assert "285 images decoded" in verdict
    assert result.out.count("  ok  ") == 8


def test_sample_decodes_a_deterministic_spread(built):
    first, second = verify(str(built), sample=10), verify(str(built), sample=10)
    assert first.ok and sum(s.num_decoded for s in first.shards) == 10
    assert [s.num_decoded for s in first.shards] == [s.num_decoded for s in second.shards]
    assert all(s.num_decoded >= 1 for s in first.shards), "10 samples over 8 shards touch every shard"
    assert sum(s.num_records for s in first.shards) == 285, "every record is still read and checked"


def test_one_flipped_byte_in_image_data_fails_the_data_checksum(copy, shardsmith):
    path = copy / SHARD
    data = bytearray(path.read_bytes())
    data[12 + 200] ^= 0x01  # inside the first record's payload
    path.write_bytes(bytes(data))
    result = shardsmith("verify", copy)
    assert result.code == 1
    assert f"{SHARD} record 0: record data checksum mismatch (at byte 0)" in result.out
    assert _verdict(result).startswith("shardsmith verify: FAILED:")


def test_a_flipped_byte_in_a_length_fails_the_length_checksum(copy, shardsmith):
    path = copy / SHARD
    data = bytearray(path.read_bytes())
    data[3] ^= 0x10
    path.write_bytes(bytes(data))
    result = shardsmith("verify", copy)
    assert result.code == 1 and "record length checksum mismatch" in result.out


def test_a_truncated_shard_fails(copy, shardsmith):
    path = copy / SHARD
    path.write_bytes(path.read_bytes()[:-100])
    result = shardsmith("verify", copy)
    assert result.code == 1
    assert "truncated record data" in result.out
    assert "file size differs from metadata.json" in result.out
    assert "record count differs from metadata.json" in result.out


def test_a_missing_shard_fails(copy, shardsmith):
    (copy / SHARD).unlink()
    result = shardsmith("verify", copy)
    assert result.code == 1
    assert f"{SHARD}: shard file is missing" in result.out
    assert "train: records read differ from num_examples" in result.out


def test_metadata_that_disagrees_with_the_files_fails(copy, shardsmith):
    metadata = json.loads((copy / "metadata.json").read_text())
    shard = metadata["splits"]["validation"]["shards"][1]
    shard["num_examples"] += 1
    shard["label_counts"] = {label: n + 1 for label, n in shard["label_counts"].items()}
    (copy / "metadata.json").write_text(json.dumps(metadata))
    result = shardsmith("verify", copy)
    assert result.code == 1
    assert "pets-validation.tfrecord-00001-of-00002: record count differs from metadata.json" in result.out
    assert "validation: num_examples differs from the sum over its shards" in result.out
    assert "dataset_info.json: disagrees with metadata.json" in result.out


def test_intact_framing_with_a_wrong_hash_or_shape_still_fails(copy, shardsmith):
    def wrong_hash(feature):
        feature["image/key/sha256"].bytes_list.value[0] = b"0" * 64

    def wrong_height(feature):
        feature["image/height"].int64_list.value[0] += 1

    _rewrite_record(copy / SHARD, 3, wrong_hash)
    _rewrite_record(copy / SHARD, 5, wrong_height)
    result = shardsmith("verify", copy)
    assert result.code == 1
    assert f"{SHARD} record 3: image/key/sha256 does not match the image bytes" in result.out
    assert f"{SHARD} record 5: decoded shape differs from height/width/channels" in result.out
    assert "checksum" not in result.out, "the framing was rewritten correctly: only the content is wrong"


def test_a_shard_file_not_listed_in_metadata_fails(copy, shardsmith):
    shutil.copy(copy / SHARD, copy / "pets-train.tfrecord-00004-of-00005")
    result = shardsmith("verify", copy)
    assert result.code == 1
    assert "pets-train.tfrecord-00004-of-00005: shard file in the folder is not listed in metadata.json" in result.out


def test_gzip_shards_are_read_as_streams(built, tmp_path, shardsmith, gzip_copy):
    target = gzip_copy(built, tmp_path / "gz")
    good = shardsmith("verify", target)
    assert good.code == 0, good.out
    assert "285 of 285 records" in _verdict(good)

    packed = Path(published_dir(target)) / (SHARD + ".gz")
    packed.write_bytes(packed.read_bytes()[:-30])
    bad = shardsmith("verify", target)
    assert bad.code == 1
    assert f"{SHARD}.gz" in bad.out and "shard cannot be read (gzip)" in bad.out


def test_records_are_read_in_bounded_chunks():
    class Recorder(io.BytesIO):
        largest = 0

        def read(self, n=-1):
            Recorder.largest = max(Recorder.largest, n)
            return super().read(n)

    record = bytes(range(256)) * (3 * READ_CHUNK // 256)
    head, tail = frame(record)
    assert list(iter_records(Recorder(head + record + tail))) == [record]
    assert Recorder.largest == READ_CHUNK, "a 3 MiB record is read 1 MiB at a time"


def test_a_folder_without_a_dataset_is_a_usage_error(tmp_path, shardsmith):
    result = shardsmith("verify", tmp_path)
    assert result.code == 2
    assert result.err.strip().splitlines() == [f"shardsmith: error: {tmp_path} holds no metadata.json: not a "
                                               "finished shardsmith dataset"]
    assert shardsmith("verify", tmp_path / "nope").code == 2


def test_verify_and_inspect_read_gs_paths(built, tmp_path, shardsmith, monkeypatch):
    """Against gcp-storage-emulator (a local Cloud Storage server on 127.0.0.1): verify and inspect read through
    Beam's FileSystems, as the build writes. Beam's GCS client talks to it anonymously (see
    tests/pipeline/commands/test_gcs_end_to_end.py for why the credential cache is settled up front)."""
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    pytest.importorskip("gcp_storage_emulator")
    from apache_beam.internal.gcp import auth
    from google.cloud import storage

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    host = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "gcp_storage_emulator", "start", "--host", "127.0.0.1",
                               "--port", str(port), "--in-memory", "--quiet"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(host + "/", timeout=1).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "the emulator did not start"
                time.sleep(0.1)
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", host)
        monkeypatch.setenv("NO_GCE_CHECK", "true")
        monkeypatch.setattr(auth._Credentials, "_credentials_init", True)
        monkeypatch.setattr(auth._Credentials, "_credentials", None)
        bucket = storage.Client.create_anonymous_client().create_bucket("verify")
        for path in built.rglob("*"):
            if path.is_file():
                bucket.blob(f"pets/{path.relative_to(built)}").upload_from_filename(str(path))
        good = shardsmith("verify", "gs://verify/pets")
        assert good.code == 0 and "285 of 285 records" in _verdict(good), good.out + good.err
        from shardsmith.read.record_sequence import records

        local, remote = records(built, "train"), records("gs://verify/pets", "train")  # through the index files
        assert [remote[i] for i in (200, 3, 117)] == [local[i] for i in (200, 3, 117)]
        assert list(remote) == list(local)
        report = shardsmith("inspect", "gs://verify/pets", "--heatmap", tmp_path / "h.png")
        assert report.code == 0 and "dataset 'pets': 285 examples" in report.out and (tmp_path / "h.png").stat().st_size
        blob = bucket.blob(f"pets/{Path(published_dir(built)).relative_to(built)}/{SHARD}")
        data = bytearray(blob.download_as_bytes())
        data[-1] ^= 0x01  # the last record's data CRC
        blob.upload_from_string(bytes(data))
        bad = shardsmith("verify", "gs://verify/pets")
        assert bad.code == 1 and "record data checksum mismatch" in bad.out
    finally:
        server.terminate()
        server.wait(timeout=10)
