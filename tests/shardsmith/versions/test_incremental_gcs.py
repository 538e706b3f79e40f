"""`--incremental` on gs:// against a real local Cloud Storage server (gcp-storage-emulator, see
tests/pipeline/commands/test_gcs_end_to_end.py for how Beam's client is pointed at it): row lists, carried shards in
another build's folder, shards rewritten without removed rows, and the version read back through shardsmith.storage."""

from __future__ import annotations

import json

import pytest


def test_incremental_builds_on_gcs_carry_rewrite_and_add(gcs_bucket):
    from pipeline import cli
    from shardsmith import records
    from shardsmith.read.dataset_checks import verify

    rows = gcs_bucket.upload_images(36, seed=3)
    out_dir = f"gs://{gcs_bucket.name}/out"
    args = ("--output_dir", out_dir, "--name", "pets", "--incremental", "--num_shards", "train=2,validation=1,test=1",
            "--max_error_fraction", "0.05")
    broken = [("train", "images/missing.jpg", "cat")]  # fails every night: counted once, on the first
    assert cli.main(["build", "--manifest", gcs_bucket.upload_manifest("d1.csv", rows[:30] + broken), *args]) == 0
    first = json.loads(gcs_bucket.read(f"{out_dir}/metadata.json"))
    assert any(blob.name.endswith(".jsonl") and "/rows/" in blob.name
               for blob in gcs_bucket.client.list_blobs(gcs_bucket.name, prefix="out/builds/"))
    day2 = rows[2:]  # two removed, six added
    assert cli.main(["build", "--manifest", gcs_bucket.upload_manifest("d2.csv", day2 + broken), *args]) == 0
    meta = json.loads(gcs_bucket.read(f"{out_dir}/metadata.json"))
    change = meta["incremental"]
    assert (change["previous"], change["num_carried_rows"], change["num_added_rows"], change["num_removed_rows"],
            change["num_images_read"], change["num_failed_again"]) == (first["build_id"], 28, 7, 2, 6, 1)
    assert 1 <= change["num_rewritten_shards"] <= 2
    for split in ("train", "validation", "test"):
        got = sorted(r["image/filename"].decode() for r in records(out_dir, split))
        assert got == sorted(uri for s, uri, _ in day2 if s == split), split
    report = verify(out_dir)
    assert report.num_problems == 0, [str(p) for p in report.all_problems]
    # The next export only appends (the two removed rows come back): only they and the broken row are parsed.
    assert cli.main(["build", "--manifest", gcs_bucket.upload_manifest("d3.csv", day2 + broken + rows[:2]),
                     *args]) == 0
    meta = json.loads(gcs_bucket.read(f"{out_dir}/metadata.json"))
    change = meta["incremental"]
    assert (change["appended"], change["num_carried_rows"], change["num_added_rows"], change["num_removed_rows"],
            change["num_images_read"], change["num_failed_again"]) == (True, 34, 3, 0, 2, 1)
    got = sorted(r["image/filename"].decode() for split in ("train", "validation", "test")
                 for r in records(out_dir, split))
    assert got == sorted(uri for _, uri, _ in rows)
    # TFDS's parts are written on Cloud Storage too, each listed in the build's record; TensorFlow's gs:// file
    # system would not resolve their relative templates, so tfds_dirs says what reads the version instead.
    from shardsmith import tfds_dirs

    version = f"out/builds/{meta['build_id']}/"
    names = {blob.name[len(version):] for blob in gcs_bucket.client.list_blobs(gcs_bucket.name, prefix=version)}
    parts = {name for name in names if name.startswith("tfds/")}
    assert "tfds/00000/dataset_info.json" in parts and "dataset_info.json" not in names
    assert {".shardsmith-written/" + name.replace("/", "~s") for name in parts} <= names
    with pytest.raises(ValueError, match="several build folders.*Cloud Storage FUSE"):
        tfds_dirs(out_dir)
