"""`shardsmith compact` on gs:// against a real local Cloud Storage server (gcp-storage-emulator, see
tests/test_gcs_end_to_end.py for how Beam's client is pointed at it): row lists and index files read from two
builds' folders, records read at their offsets with ranged reads, the version published and read back."""

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

BUCKET = "shardsmith-compaction"


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


def test_compaction_on_gcs_matches_a_full_build(gcs):
    from pipeline import cli
    from shardsmith import records
    from shardsmith.read.verify import verify

    bucket = gcs.bucket(BUCKET)
    rng = random.Random(5)
    rows = []
    for i in range(36):
        out = io.BytesIO()
        Image.new("RGB", (32 + i, 24), tuple(rng.randrange(256) for _ in range(3))).save(out, "JPEG", quality=85)
        bucket.blob(f"in/images/{i:03d}.jpg").upload_from_string(out.getvalue())
        rows.append((("train", "train", "train", "train", "validation", "test")[i % 6], f"images/{i:03d}.jpg",
                     ("cat", "dog", "emu")[i % 3]))
    out_dir = f"gs://{BUCKET}/out"
    shards = ("--num_shards", "train=2,validation=1,test=1")
    args = ("--output_dir", out_dir, "--name", "pets", "--incremental", *shards)
    assert cli.main(["build", "--manifest", _upload_manifest(bucket, "d1.csv", rows[:30]), *args]) == 0
    day2 = rows[1:]  # one removed, six added
    assert cli.main(["build", "--manifest", _upload_manifest(bucket, "d2.csv", day2), *args]) == 0
    previous = json.loads(_read(f"{out_dir}/metadata.json"))
    assert previous["incremental"]["generations"] == 2
    assert cli.main(["compact", out_dir]) == 0
    meta = json.loads(_read(f"{out_dir}/metadata.json"))
    assert meta["incremental"]["previous"] == previous["build_id"] and meta["incremental"]["generations"] == 1
    # The full build of the same rows (in version order: here all URIs differ, so any order) and label ids.
    full_dir = f"gs://{BUCKET}/full"
    assert cli.main(["build", "--manifest", _upload_manifest(bucket, "full.csv", day2), "--output_dir", full_dir,
                     "--name", "pets", *shards]) == 0
    full = json.loads(_read(f"{full_dir}/metadata.json"))
    assert full["labels"] == meta["labels"]
    for split, info in full["splits"].items():
        compacted = meta["splits"][split]["shards"]
        assert [s["file"] for s in compacted] == [s["file"] for s in info["shards"]]
        for mine, theirs in zip(compacted, info["shards"], strict=True):
            for key in ("file", "index"):
                assert _read(f"{out_dir}/{meta['build_dir']}/{mine[key]}") == _read(
                    f"{full_dir}/{full['build_dir']}/{theirs[key]}"), mine[key]
        got = sorted(r["image/filename"].decode() for r in records(out_dir, split))
        assert got == sorted(uri for s, uri, _ in day2 if s == split), split
    report = verify(out_dir)
    assert report.num_problems == 0, [str(p) for p in report.all_problems]
