"""Versions on s3:// against a real local S3-protocol server (moto's server, tests/conftest.py `s3_server`),
boto3 pointed at it by the standard AWS environment (AWS_ENDPOINT_URL and test credentials), as a team on AWS
sets it: `--incremental` nights that carry, rewrite and add shards, `compact` writing a full build's shards, a tag
that outlives retention, verify, and the folder's lock refusing a second build."""

from __future__ import annotations

import json

import pytest


def test_nights_compaction_and_tags_on_s3_read_as_full_builds(s3_bucket, capsys):
    from pipeline import cli
    from shardsmith import records
    from shardsmith.read.dataset_checks import verify

    rows = s3_bucket.upload_images(36, seed=3)
    out_dir = f"s3://{s3_bucket.name}/out"
    shards = ("--num_shards", "train=2,validation=1,test=1")
    args = ("--output_dir", out_dir, "--name", "pets", "--incremental", *shards, "--keep_builds", "1",
            "--keep_days", "0", "--max_error_fraction", "0.05")
    broken = [("train", "images/missing.jpg", "cat")]  # fails every night: counted once, on the first

    def metadata(folder: str = out_dir) -> dict:
        return json.loads(s3_bucket.read(f"{folder}/metadata.json"))

    def uris(split: str, version: str | None = None) -> list[str]:
        return sorted(r["image/filename"].decode() for r in records(out_dir, split, version=version))

    assert cli.main(["build", "--manifest", s3_bucket.upload_manifest("d1.csv", rows[:30] + broken), *args]) == 0
    first = metadata()["build_id"]
    assert any("/rows/" in key and key.endswith(".jsonl") for key in s3_bucket.keys("out/builds/"))
    assert not s3_bucket.keys("out/.shardsmith-lock"), "the lock is released"
    assert cli.main(["tag", out_dir, first, "baseline"]) == 0
    day2 = rows[2:]  # two removed, six added
    assert cli.main(["build", "--manifest", s3_bucket.upload_manifest("d2.csv", day2 + broken), *args]) == 0
    change = metadata()["incremental"]
    assert (change["previous"], change["num_carried_rows"], change["num_added_rows"], change["num_removed_rows"],
            change["num_images_read"], change["num_failed_again"]) == (first, 28, 7, 2, 6, 1)
    assert 1 <= change["num_rewritten_shards"] <= 2 and change["generations"] == 2
    for split in ("train", "validation", "test"):
        assert uris(split) == sorted(uri for s, uri, _ in day2 if s == split), split
    assert uris("train", "baseline") == sorted(uri for s, uri, _ in rows[:30] if s == "train")
    report = verify(out_dir)
    assert report.num_problems == 0, [str(p) for p in report.all_problems]

    night = metadata()["build_id"]
    card = s3_bucket.read(f"{out_dir}/builds/{night}/card.html").decode()  # the night's dataset card, on S3 too
    assert f"Built on version <code>{first}</code>" in card and card.count('<img src="data:image/jpeg') >= 2
    assert cli.main(["compact", out_dir, "--keep_builds", "1", "--keep_days", "0"]) == 0
    meta = metadata()
    assert meta["incremental"]["previous"] == night and meta["incremental"]["generations"] == 1
    full_dir = f"s3://{s3_bucket.name}/full"
    assert cli.main(["build", "--manifest", s3_bucket.upload_manifest("full.csv", day2 + broken), "--output_dir",
                     full_dir, "--name", "pets", *shards, "--max_error_fraction", "0.05"]) == 0
    full = metadata(full_dir)
    assert full["labels"] == meta["labels"]
    for split, info in full["splits"].items():
        compacted = meta["splits"][split]["shards"]
        assert [s["file"] for s in compacted] == [s["file"] for s in info["shards"]]
        for mine, theirs in zip(compacted, info["shards"], strict=True):
            for key in ("file", "index"):
                assert s3_bucket.read(f"{out_dir}/{meta['build_dir']}/{mine[key]}") == s3_bucket.read(
                    f"{full_dir}/{full['build_dir']}/{theirs[key]}"), mine[key]
        assert uris(split) == sorted(uri for s, uri, _ in day2 if s == split), split
    report = verify(out_dir)
    assert report.num_problems == 0, [str(p) for p in report.all_problems]
    # Retention (--keep_builds 1) retired the night, and kept the tagged first build through all of it.
    with pytest.raises(FileNotFoundError, match=rf"version {night} is no longer kept in {out_dir}"):
        records(out_dir, "train", version=night)
    assert uris("train", "baseline") == sorted(uri for s, uri, _ in rows[:30] if s == "train")
    capsys.readouterr()
    assert cli.main(["versions", out_dir, "--json"]) == 0
    assert [v["tags"] for v in json.loads(capsys.readouterr().out)] == [[], ["baseline"]]


def test_the_lock_on_s3_refuses_a_second_build_and_an_overwrite_publishes_after_release(s3_bucket, shardsmith):
    from shardsmith.output_folder.lock import acquire_lock

    rows = s3_bucket.upload_images(12, seed=4)
    manifest = s3_bucket.upload_manifest("locked.csv", rows)
    out_dir = f"s3://{s3_bucket.name}/locked"
    args = ("build", "--manifest", manifest, "--output_dir", out_dir, "--name", "pets", "--num_shards", "1")
    held = acquire_lock(out_dir, "20260101T000000Z-0000beef")
    result = shardsmith(*args)
    assert result.code == 2, result.err
    assert "is being built by build 20260101T000000Z-0000beef" in result.err and "Traceback" not in result.err
    assert not s3_bucket.keys("locked/builds/"), "nothing written"
    held.release()
    assert shardsmith(*args).code == 0
    assert shardsmith(*args, "--overwrite").code == 0
    assert not s3_bucket.keys("locked/.shardsmith-lock")
