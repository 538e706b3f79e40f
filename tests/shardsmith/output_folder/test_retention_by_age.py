"""Retention that protects readers (issue 56 item 1): a version beyond --keep_builds is removed only once a newer
one has been published for --keep_days days (default 7), every run that retires a version says which (its summary,
`versions`, retired.json: when, by which build, with which settings), and a reader's advice to pass `version=`
is given only for a version still kept. Real builds through the CLI (FnApiRunner), real files; a version's age is
set by writing an earlier `published` time into the build record of the version that replaced it, as a week
passing would."""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import pytest

from shardsmith.format.naming import BUILD_RECORD, BUILDS_DIR, METADATA_FILE, RETIRED_FILE

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

DAY = 86400


def ok(shardsmith, *args):
    done = shardsmith(*args)
    assert done.code == 0, done.err + done.out
    return done


def night(shardsmith, tmp_path: Path, out: Path, day: str, rows, *extra: str):
    manifest = tmp_path / f"{day}.csv"
    with manifest.open("w", newline="") as f:
        csv.writer(f).writerows([("split", "image_uri", "label"), *rows])
    return ok(shardsmith, "build", "--manifest", manifest, "--output_dir", out, "--name", "pets", "--incremental",
              "--num_shards", "train=2,validation=1,test=1", *extra)


def published(out: Path) -> str:
    return json.loads((out / METADATA_FILE).read_text())["build_id"]


def versions_kept(out: Path) -> list[str]:
    return sorted(p.name for p in (out / BUILDS_DIR).iterdir() if (p / METADATA_FILE).exists())


def published_days_ago(out: Path, version: str, days: float) -> None:
    """Sets version `version`'s publish time `days` back in its build record: what retention reads of when the
    version before it was replaced."""
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - days * DAY))
    path = out / BUILDS_DIR / version / BUILD_RECORD
    record = json.loads(path.read_text())
    assert record["published"] >= record["started"]  # every publish records it
    path.write_text(json.dumps({**record, "published": when}, indent=2) + "\n")


def test_a_version_replaced_less_than_keep_days_ago_stays_and_one_replaced_earlier_goes_said_everywhere(
        version_rows, shardsmith, tmp_path):
    rows = version_rows(10)
    out = tmp_path / "out"
    night(shardsmith, tmp_path, out, "d1", rows[:30])
    first = published(out)
    night(shardsmith, tmp_path, out, "d2", rows[:33])
    second = published(out)
    done = night(shardsmith, tmp_path, out, "d3", rows[:36])
    third = published(out)
    # --keep_builds 2 (the default) would retire the first; it was replaced a moment ago, so it stays.
    assert versions_kept(out) == sorted([first, second, third])
    assert "retired" not in done.out and not (out / RETIRED_FILE).exists()

    published_days_ago(out, second, 7.5)  # the first was replaced by the second 7.5 days ago
    published_days_ago(out, third, 6.5)  # the second by the third 6.5 days ago: within --keep_days 7
    done = night(shardsmith, tmp_path, out, "d4", rows[:39])
    fourth = published(out)
    assert versions_kept(out) == sorted([second, third, fourth])
    line = next(line for line in done.out.splitlines() if line.strip().startswith("retired"))
    assert f"version {first} (--keep_builds 2, --keep_days 7; {RETIRED_FILE}; `shardsmith tag` keeps" in line
    (entry,) = json.loads((out / RETIRED_FILE).read_text())["retired"]
    assert (entry["version"], entry["by"], entry["keep_builds"], entry["keep_days"]) == (first, fourth, 2, 7)
    listing = ok(shardsmith, "versions", out).out.splitlines()
    assert [line.split()[0] for line in listing] == [fourth, third, second, first]
    assert listing[-1].startswith(f"{first}  retired at ") and f"by {fourth} (--keep_builds 2, --keep_days 7)" \
        in listing[-1]
    assert [v["id"] for v in json.loads(ok(shardsmith, "versions", out, "--json").out)] == [fourth, third, second]

    # --keep_days 0: by --keep_builds alone, as before the rule.
    done = night(shardsmith, tmp_path, out, "d5", rows[:42], "--keep_days", "0")
    assert versions_kept(out) == sorted([fourth, published(out)])
    assert f"version {second}, version {third} (--keep_builds 2;" in done.out


def test_compaction_keeps_a_version_it_replaces_for_keep_days_and_says_what_it_retired(version_rows, shardsmith,
                                                                                       tmp_path):
    rows = version_rows(10)
    out = tmp_path / "out"
    night(shardsmith, tmp_path, out, "d1", rows[:30])
    first = published(out)
    night(shardsmith, tmp_path, out, "d2", rows[:36])
    second = published(out)
    done = ok(shardsmith, "compact", out, "--keep_builds", "1")
    compacted = published(out)
    assert versions_kept(out) == sorted([first, second, compacted]) and "retired" not in done.out
    published_days_ago(out, second, 8)
    published_days_ago(out, compacted, 8)
    night(shardsmith, tmp_path, out, "d3", rows[:36] + rows[40:41], "--keep_builds", "1")
    assert versions_kept(out) == sorted([compacted, published(out)])  # replaced a moment ago
    retired = json.loads((out / RETIRED_FILE).read_text())["retired"]
    assert {entry["version"] for entry in retired} == {first, second}


@pytest.mark.parametrize("days, said", [("-1", "--keep_days must be a number of days from 0 to 36500"),
                                        ("nan", "from 0 to 36500"), ("inf", "from 0 to 36500"),
                                        ("a week", "argument --keep_days: invalid float value: 'a week'")])
def test_keep_days_takes_a_number_of_days_from_0(tmp_path, capsys, days, said):
    from pipeline import cli

    try:  # a value that is no number is argparse's to refuse (SystemExit); one out of range is shardsmith's
        code = cli.main(["build", "--manifest", str(tmp_path / "none.csv"), "--output_dir", str(tmp_path / "out"),
                         "--name", "x", "--keep_days", days])
    except SystemExit as exited:
        code = exited.code
    err = capsys.readouterr().err
    assert code == 2 and said in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_a_torch_state_names_version_only_while_it_is_kept(version_rows, shardsmith, tmp_path):
    torch = pytest.importorskip("shardsmith.torch")
    rows = version_rows(10)
    out = tmp_path / "out"
    night(shardsmith, tmp_path, out, "d1", rows[:30])
    first = published(out)
    state = torch.ShardDataset(out, "train").state_dict()
    night(shardsmith, tmp_path, out, "d2", rows[:33])
    with pytest.raises(ValueError, match=rf"pass version='{first}' to resume it \(kept now; `shardsmith tag {out} "
                                         rf"{first} NAME` keeps it from retention\)"):
        torch.ShardDataset(out, "train").load_state_dict(state)
    night(shardsmith, tmp_path, out, "d3", rows[:36], "--keep_builds", "1", "--keep_days", "0")
    with pytest.raises(ValueError, match=rf"it cannot be resumed \(version {first} is no longer kept in {out}: "
                                         r"retention \(--keep_builds 1\) retired it") as refused:
        torch.ShardDataset(out, "train").load_state_dict(state)
    assert "version=" not in str(refused.value) and "\n" not in str(refused.value)
