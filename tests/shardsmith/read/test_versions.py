"""`shardsmith versions OUT [--json]`, and `--version ID` of verify and inspect: after builds published into one
folder with --keep_builds, every kept complete build is a version (newest first, the published one current);
an unfinished build is not; a bad id is one line. Real builds through the CLI, FnApiRunner."""

from __future__ import annotations

import json

import pytest

from shardsmith.format.build_record import BuildRecord
from shardsmith.format.naming import BUILD_ID
from shardsmith.output_folder.layout import new_build_id, start_build


@pytest.fixture(scope="module")
def two_versions(tmp_path_factory, image_set_factory):
    """Two builds of different manifests published into one folder (the second with --overwrite, keeping 3),
    and an unfinished third build's folder. Returns (out, [older build id, newer build id], unfinished id)."""
    from pipeline import cli
    from shardsmith.format.metadata import read_metadata

    root = tmp_path_factory.mktemp("versions")
    first = image_set_factory(root / "first", {"cat": {"train": 6, "test": 2}, "dog": {"train": 6, "test": 2}})
    second = image_set_factory(root / "second", {"cat": {"train": 9, "validation": 3, "test": 2},
                                                 "dog": {"train": 6, "test": 2}})
    out = root / "out"
    ids = []
    for image_set, more in ((first, ()), (second, ("--overwrite", "--keep_builds", "3"))):
        assert cli.main(["build", "--manifest", str(image_set.manifest), "--output_dir", str(out), "--name", "pets",
                         "--num_shards", "1", *more]) == 0
        ids.append(read_metadata(str(out)).build_id)
    unfinished = new_build_id()
    start_build(str(out), BuildRecord.for_build(unfinished, "pets"))  # a build that never finished
    return out, ids, unfinished


def test_build_ids_sort_by_start_time_within_a_second_too():
    """Builds take under a second: two published in one second (as the fixture's are) must list, and retire,
    in the order they started. Ids keep the pattern every scan of a build folder expects."""
    second = 1_795_686_000.0
    ids = [new_build_id(second + fraction) for fraction in (0.0, 0.001, 0.25, 0.5, 0.999, 1.0)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids), ids
    assert all(BUILD_ID.fullmatch(build_id) for build_id in ids)


def test_versions_lists_each_kept_complete_build_newest_first(two_versions, shardsmith):
    out, (older, newer), unfinished = two_versions
    result = shardsmith("versions", out)
    assert result.code == 0, result.err
    lines = result.out.strip().splitlines()
    assert len(lines) == 2 and unfinished not in result.out
    assert lines[0].startswith(newer) and lines[0].endswith("(current)")
    assert "train 15, validation 3, test 4" in lines[0]
    assert lines[1].startswith(older) and "(current)" not in lines[1] and "train 12, test 4" in lines[1]


def test_versions_json_is_a_machine_readable_list(two_versions, shardsmith):
    out, (older, newer), _ = two_versions
    result = shardsmith("versions", out, "--json")
    assert result.code == 0, result.err
    listed = json.loads(result.out)
    assert [(v["id"], v["current"], v["records"], v["num_records"]) for v in listed] == [
        (newer, True, {"train": 15, "validation": 3, "test": 4}, 22),
        (older, False, {"train": 12, "test": 4}, 16),
    ]
    assert all(v["build_dir"] == f"builds/{v['id']}" and v["started"].endswith("Z") for v in listed)


def test_verify_and_inspect_read_the_version_named(two_versions, shardsmith):
    out, (older, _), _ = two_versions
    verified = shardsmith("verify", out, "--version", older)
    assert verified.code == 0, verified.out + verified.err
    assert "OK: 16 of 16 records" in verified.out.strip().splitlines()[-1]
    assert f"builds/{older}" in verified.out
    inspected = shardsmith("inspect", out, "--version", older)
    assert inspected.code == 0, inspected.err
    assert "validation" not in inspected.out and f"builds/{older}" in inspected.out


@pytest.mark.parametrize("command", ["verify", "inspect"])
def test_a_version_that_is_not_one_is_a_one_line_usage_error(two_versions, shardsmith, command):
    out, _, unfinished = two_versions
    bad = shardsmith(command, out, "--version", "../yesterday")
    assert bad.code == 2 and bad.err.strip().count("\n") == 0
    assert "version '../yesterday' is neither a build id" in bad.err and "shardsmith versions" in bad.err
    untagged = shardsmith(command, out, "--version", "yesterday")
    assert untagged.code == 2 and untagged.err.strip().count("\n") == 0
    assert "no version or tag 'yesterday'" in untagged.err and "shardsmith versions" in untagged.err
    never = shardsmith(command, out, "--version", unfinished)
    assert never.code == 2 and never.err.strip().count("\n") == 0
    assert f"no version {unfinished} in {out}: its build did not finish" in never.err


def test_versions_of_a_folder_without_a_dataset_is_a_usage_error(tmp_path, shardsmith):
    result = shardsmith("versions", tmp_path)
    assert result.code == 2 and "holds no published shardsmith dataset" in result.err


def test_versions_of_a_folder_whose_metadata_json_is_corrupt_says_so_in_one_line(two_versions, tmp_path,
                                                                                  shardsmith):
    """Not "built before builds had folders": the file that names the published version cannot be read."""
    import shutil

    out = tmp_path / "out"
    shutil.copytree(two_versions[0], out)
    (out / "metadata.json").write_text('{"name": "pets", "splits": {')
    result = shardsmith("versions", out)
    assert result.code == 2 and result.out == ""
    assert result.err == (f"shardsmith: error: {out}/metadata.json is not valid JSON (line 1 column 29): Expecting "
                          "property name enclosed in double quotes; it names the published version, so the "
                          "versions cannot be listed\n")
