"""`--incremental` on gs:// against a real local Cloud Storage server (gcp-storage-emulator, see
tests/test_gcs_end_to_end.py for how Beam's client is pointed at it): row lists, carried shards in another
build's folder, shards rewritten without removed rows, and the version read back through shardsmith.storage."""

from __future__ import annotations

import csv
import io
import json
import random

import pytest

try:
    import gcp_storage_emulator  # noqa: F401
except ImportError:
    pytest.skip("gcp-storage-emulator is not installed (pip install gcp-storage-emulator)", allow_module_level=True)

from PIL import Image

BUCKET = "shardsmith-incremental"


@pytest.fixture(scope="module")
def gcs(emulator, beam_on_emulator):
    with beam_on_emulator(emulator) as (client, _):
        client.create_bucket(BUCKET)
        yield client


def _upload_manifest(bucket, name: str, rows: list[tuple[str, str, str]]) -> str:
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(["split", "image_uri", "label"])
    writer.writerows(rows)
    bucket.blob(f"in/{name}").upload_from_string(text.getvalue())
    return f"gs://{BUCKET}/in/{name}"


def _read(uri: str) -> bytes:
    from apache_beam.io.filesystems import FileSystems

    with FileSystems.open(uri) as f:
        return f.read()


def test_incremental_builds_on_gcs_carry_rewrite_and_add(gcs):
    from pipeline import cli
    from shardsmith import records
    from shardsmith.read.verify import verify

    bucket = gcs.bucket(BUCKET)
    rng = random.Random(3)
    rows = []
    for i in range(36):
        label = ("cat", "dog", "emu")[i % 3]
        split = ("train", "train", "train", "train", "validation", "test")[i % 6]
        out = io.BytesIO()
        Image.new("RGB", (32 + i, 24), tuple(rng.randrange(256) for _ in range(3))).save(out, "JPEG", quality=85)
        bucket.blob(f"in/images/{i:03d}.jpg").upload_from_string(out.getvalue())
        rows.append((split, f"images/{i:03d}.jpg", label))
    out_dir = f"gs://{BUCKET}/out"
    args = ("--output_dir", out_dir, "--name", "pets", "--incremental", "--num_shards", "train=2,validation=1,test=1")
    assert cli.main(["build", "--manifest", _upload_manifest(bucket, "d1.csv", rows[:30]), *args]) == 0
    first = json.loads(_read(f"{out_dir}/metadata.json"))
    assert any(blob.name.endswith(".jsonl") and "/rows/" in blob.name
               for blob in gcs.list_blobs(BUCKET, prefix="out/builds/"))
    day2 = rows[2:]  # two removed, six added
    assert cli.main(["build", "--manifest", _upload_manifest(bucket, "d2.csv", day2), *args]) == 0
    meta = json.loads(_read(f"{out_dir}/metadata.json"))
    change = meta["incremental"]
    assert (change["previous"], change["num_carried_rows"], change["num_added_rows"], change["num_removed_rows"],
            change["num_images_read"]) == (first["build_id"], 28, 6, 2, 6)
    assert 1 <= change["num_rewritten_shards"] <= 2
    for split in ("train", "validation", "test"):
        got = sorted(r["image/filename"].decode() for r in records(out_dir, split))
        assert got == sorted(uri for s, uri, _ in day2 if s == split), split
    report = verify(out_dir)
    assert report.num_problems == 0, [str(p) for p in report.all_problems]
