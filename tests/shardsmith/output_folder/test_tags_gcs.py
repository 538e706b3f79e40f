"""`shardsmith tag` on gs:// against a real local Cloud Storage server (gcp-storage-emulator, see
tests/pipeline/commands/test_gcs_end_to_end.py for how Beam's client is pointed at it): the tag is written under the
folder's lock object, retention on Cloud Storage keeps the tagged version and records the one it retires, and readers
take the tag's name and say the retired version is no longer kept."""

from __future__ import annotations

import json

import pytest


def test_a_tag_on_gcs_keeps_its_version_through_retention(gcs_bucket, capsys):
    from pipeline import cli
    from shardsmith import records

    rows = gcs_bucket.upload_images(24, seed=11)
    out_dir = f"gs://{gcs_bucket.name}/out"
    args = ("--output_dir", out_dir, "--name", "pets", "--num_shards", "train=2,validation=1,test=1",
            "--keep_builds", "1", "--keep_days", "0")

    def build(day: str, day_rows, *more: str) -> str:
        assert cli.main(["build", "--manifest", gcs_bucket.upload_manifest(day, day_rows), *args, *more]) == 0
        return json.loads(gcs_bucket.read(f"{out_dir}/metadata.json"))["build_id"]

    def uris(version: str) -> list[str]:
        return sorted(r["image/filename"].decode() for r in records(out_dir, "train", version=version))

    first = build("d1.csv", rows[:18])
    assert cli.main(["tag", out_dir, first, "baseline"]) == 0
    tags = json.loads(gcs_bucket.read(f"{out_dir}/tags.json"))["tags"]
    assert tags["baseline"]["version"] == first
    assert not list(gcs_bucket.client.list_blobs(gcs_bucket.name, prefix="out/.shardsmith-lock")), "lock released"
    second = build("d2.csv", rows[:21], "--overwrite")
    build("d3.csv", rows, "--overwrite")
    assert uris("baseline") == uris(first) == sorted(uri for s, uri, _ in rows[:18] if s == "train")
    with pytest.raises(FileNotFoundError, match=rf"version {second} is no longer kept in {out_dir}: retention "
                                                r"\(--keep_builds 1\) retired it at "):
        records(out_dir, "train", version=second)
    capsys.readouterr()
    assert cli.main(["versions", out_dir, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(v["id"], v["tags"]) for v in listed][1:] == [(first, ["baseline"])]
    assert cli.main(["untag", out_dir, "baseline"]) == 0
    assert json.loads(gcs_bucket.read(f"{out_dir}/tags.json")) == {"tags": {}}
