"""`shardsmith compact` on gs:// against a real local Cloud Storage server (gcp-storage-emulator, see
tests/pipeline/commands/test_gcs_end_to_end.py for how Beam's client is pointed at it): row lists and index files read
from two builds' folders, records read at their offsets with ranged reads, the version published and read back."""

from __future__ import annotations

import json


def test_compaction_on_gcs_matches_a_full_build(gcs_bucket):
    from pipeline import cli
    from shardsmith import records
    from shardsmith.read.dataset_checks import verify

    rows = gcs_bucket.upload_images(36, seed=5)
    out_dir = f"gs://{gcs_bucket.name}/out"
    shards = ("--num_shards", "train=2,validation=1,test=1")
    args = ("--output_dir", out_dir, "--name", "pets", "--incremental", *shards)
    assert cli.main(["build", "--manifest", gcs_bucket.upload_manifest("d1.csv", rows[:30]), *args]) == 0
    day2 = rows[1:]  # one removed, six added
    assert cli.main(["build", "--manifest", gcs_bucket.upload_manifest("d2.csv", day2), *args]) == 0
    previous = json.loads(gcs_bucket.read(f"{out_dir}/metadata.json"))
    assert previous["incremental"]["generations"] == 2
    assert cli.main(["compact", out_dir]) == 0
    meta = json.loads(gcs_bucket.read(f"{out_dir}/metadata.json"))
    assert meta["incremental"]["previous"] == previous["build_id"] and meta["incremental"]["generations"] == 1
    # The full build of the same rows (in version order: here all URIs differ, so any order) and label ids.
    full_dir = f"gs://{gcs_bucket.name}/full"
    assert cli.main(["build", "--manifest", gcs_bucket.upload_manifest("full.csv", day2), "--output_dir", full_dir,
                     "--name", "pets", *shards]) == 0
    full = json.loads(gcs_bucket.read(f"{full_dir}/metadata.json"))
    assert full["labels"] == meta["labels"]
    for split, info in full["splits"].items():
        compacted = meta["splits"][split]["shards"]
        assert [s["file"] for s in compacted] == [s["file"] for s in info["shards"]]
        for mine, theirs in zip(compacted, info["shards"], strict=True):
            for key in ("file", "index"):
                assert gcs_bucket.read(f"{out_dir}/{meta['build_dir']}/{mine[key]}") == gcs_bucket.read(
                    f"{full_dir}/{full['build_dir']}/{theirs[key]}"), mine[key]
        got = sorted(r["image/filename"].decode() for r in records(out_dir, split))
        assert got == sorted(uri for s, uri, _ in day2 if s == split), split
    report = verify(out_dir)
    assert report.num_problems == 0, [str(p) for p in report.all_problems]
