"""Compaction everywhere the build runs (issue 28 item 7): the image's one entry point (pipeline/entrypoint.py, what
the Flex Template launcher and Airflow's Beam operator run) runs `shardsmith compact` when the compaction
template's `command` parameter says so, with the launcher's one-value `--name=value` arguments, and runs the build
as before when it is absent. The compaction template's files are generated from compact's own flag declarations."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import entrypoint
from shardsmith import records

ROOT = Path(__file__).resolve().parents[2]
OPTIONS = ROOT / "pipeline" / "options"


def _compaction_tests():
    """tests/pipeline/commands/test_compaction.py as a module: its incremental-build helpers (the suite imports test
    files by path, never as a `tests` package)."""
    compaction_tests = Path(__file__).parent / "commands" / "test_compaction.py"
    spec = importlib.util.spec_from_file_location("compaction_tests", compaction_tests)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


compaction = _compaction_tests()
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def launched(capsys, *argv: str) -> tuple[int, str, str]:
    """`python /template/main.py ARGS` as the launcher runs it (the same `main`), in this process."""
    code = entrypoint.main([str(arg) for arg in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def uris(out: Path, split: str, version: str | None = None) -> list[str]:
    return sorted(r["image/filename"].decode() for r in records(out, split, version=version))


def test_the_entry_point_builds_by_default_and_compacts_with_command_compact(version_rows, csv_manifest, capsys,
                                                                          tmp_path):
    rows = version_rows()
    out = tmp_path / "out"
    day1, day2 = rows[:60], rows[2:80]
    shards = "--num_shards=train=3,validation=1,test=1"
    # The build template's launch: no command parameter, booleans as true/false. Then the same with
    # --command=build: the build path either way.
    for day, day_rows, extra in (("d1", day1, ()), ("d2", day2, ("--command=build",))):
        code, _, err = launched(capsys, f"--manifest={csv_manifest(day, day_rows)}",
                                f"--output_dir={out}", "--name=pets", "--incremental=true", "--overwrite=false",
                                shards, *extra)
        assert code == 0, err
    built = compaction.metadata(out)
    assert built["incremental"]["generations"] == 2 and built["incremental"]["num_removed_rows"] == 2
    previous = built["build_id"]

    # --compact_after=2: a version of 2 generations is left as it is, exit 0 (a DAG runs it after every build).
    code, said, err = launched(capsys, "--command=compact", f"--output_dir={out}", "--compact_after=2",
                               "--break_lock=false")
    assert code == 0, err
    assert "nothing to compact, nothing written" in said and compaction.metadata(out)["build_id"] == previous

    # The real thing, as a separate `python -m pipeline.entrypoint` process with the launcher's spelling.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run([sys.executable, "-m", "pipeline.entrypoint", f"--output_dir={out}", "--command=compact",
                           "--compact_after=1", "--keep_builds=3", "--break_lock=false"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "compacted version" in done.stdout
    meta = compaction.metadata(out)
    assert meta["build_id"] != previous and meta["incremental"]["generations"] == 1
    assert meta["incremental"]["previous"] == previous
    assert [s["num_shards"] for s in meta["splits"].values()] == [3, 1, 1]
    assert all("build" not in shard for s in meta["splits"].values() for shard in s["shards"])
    for split in compaction.SPLITS:
        want = sorted(uri for s, uri, _ in day2 if s == split)
        assert uris(out, split) == want
        assert uris(out, split, version=previous) == want  # the earlier version stays readable
    assert "every check holds" in subprocess.run(
        [sys.executable, "-m", "pipeline", "verify", str(out)], capture_output=True, text=True, env=env,
        timeout=300).stdout
    # A retried launch after the publish finds one generation: a no-op, never a second publish.
    code, said, err = launched(capsys, "--command=compact", f"--output_dir={out}", "--compact_after=1")
    assert code == 0 and "nothing to compact" in said, err
    assert compaction.metadata(out)["build_id"] == meta["build_id"]


def test_the_entry_point_refuses_an_unknown_command_and_bad_values_in_one_line(version_rows, shardsmith, csv_manifest,
                                                                              capsys, tmp_path):
    rows = version_rows()
    code, _, err = launched(capsys, "--command=rebuild", f"--output_dir={tmp_path}")
    assert code == 2 and err.strip().splitlines() == [
        "shardsmith: error: --command=rebuild: the template's command must be one of build, compact"]
    out = tmp_path / "one"
    compaction.incremental(shardsmith, csv_manifest, out, "m", rows[:30])
    for bad, message in (("--compact_after=0", "--compact_after must be at least 1"),
                         ("--keep_builds=0", "--keep_builds must be at least 1"),
                         ("--num_shards=2", "compact: unknown flag --num_shards=2")):
        code, _, err = launched(capsys, "--command=compact", f"--output_dir={out}", bad)
        assert code == 2 and len(err.strip().splitlines()) == 1 and message in err, (bad, err)


def test_launcher_arguments_become_compact_arguments():
    assert entrypoint.command_of(["--manifest=gs://b/m.csv", "--name=pets"]) == (
        "build", ["--manifest=gs://b/m.csv", "--name=pets"])
    assert entrypoint.to_compact_args([
        "--output_dir=gs://b/old", "--break_lock=true", "--compact_after=7", "--runner=DataflowRunner",
        "--output_dir=gs://b/out", "--template_location=gs://b/t/job", "--keep_builds=3",
    ]) == ["gs://b/out", "--break_lock", "--compact_after=7", "--runner=DataflowRunner",
           "--template_location=gs://b/t/job", "--keep_builds=3"]
    assert entrypoint.to_compact_args(["--output_dir=gs://b/out", "--break_lock=false"]) == ["gs://b/out"]


def test_the_compaction_template_is_compacts_flags_plus_the_command():
    from pipeline import cli
    from pipeline.options import flex_template

    metadata = json.loads((OPTIONS / "flex_template_compact_metadata.json").read_text())
    assert flex_template.COMPACT_METADATA_FILE.read_text() == json.dumps(metadata, indent=2) + "\n"
    parameters = {p["name"]: p for p in metadata["parameters"]}
    parser = cli._parser()._subparsers._group_actions[0].choices["compact"]
    local_only = {"writer_processes"}  # as the build's: remote runners spread shards over their own workers
    flags = {action.dest for action in parser._actions if action.dest not in {"help", *local_only}}
    assert set(parameters) == flags | {"command"}
    assert {name for name, p in parameters.items() if not p["isOptional"]} == {"command", "output_dir"}
    examples = {"command": ("compact", "build"), "output_dir": ("gs://my-bucket/datasets/pets", "/data/pets"),
                "keep_builds": ("7", "0"), "keep_days": ("7.5", "-1"), "compact_after": ("7", "0"),
                "break_lock": ("true", "yes"), "no_card": ("false", "off")}
    assert set(examples) == set(parameters), "every parameter needs a good and a bad example here"
    for name, (good, bad) in examples.items():
        (regex,) = parameters[name]["regexes"]
        assert re.fullmatch(regex, good) and not re.fullmatch(regex, bad), (name, regex)
    kinds = json.loads((OPTIONS / "flex_template_compact_flags.json").read_text())
    assert (kinds["list"], kinds["boolean"]) == ([], ["break_lock", "no_card"])
    # The build template does not declare `command`: a build launch cannot become a compaction.
    build = json.loads((OPTIONS / "flex_template_metadata.json").read_text())
    assert "command" not in {p["name"] for p in build["parameters"]}


def test_run_template_with_command_compact_launches_the_compaction_spec(capsys):
    import shlex

    from pipeline.cloud.cli import main as cloud_main

    code = cloud_main(["run-template", "--dry-run", "--project", "my-project", "--region", "europe-west4",
                       "--bucket", "my-bucket", "--tag", "abc123", "--job_name", "pets-compact", "--command", "compact",
                       "--output_dir", "gs://my-bucket/datasets/pets", "--compact_after", "7", "--break_lock"],
                      environ={})
    printed = capsys.readouterr()
    assert code == 0, printed.err
    (line,) = printed.out.splitlines()
    words = shlex.split(line)
    assert "--template-file-gcs-location=gs://my-bucket/shardsmith/templates/shardsmith-abc123-compact.json" in words
    (given,) = [word.removeprefix("--parameters=") for word in words if word.startswith("--parameters=")]
    parameters = dict(item.split("=", 1) for item in given.split(","))
    assert parameters.pop("sdk_container_image").endswith("/shardsmith:abc123")
    assert parameters == {"command": "compact", "output_dir": "gs://my-bucket/datasets/pets", "compact_after": "7",
                          "break_lock": "true"}
    declared = {p["name"]: p for p in json.loads((OPTIONS / "flex_template_compact_metadata.json").read_text())[
        "parameters"]}
    for name, value in parameters.items():
        assert all(re.fullmatch(regex, value) for regex in declared[name]["regexes"]), (name, value)
    # Without --command compact, compact's flags are not the build template's parameters.
    assert cloud_main(["run-template", "--dry-run", "--project", "my-project", "--region", "europe-west4",
                       "--bucket", "my-bucket", "--output_dir", "gs://my-bucket/datasets/pets", "--compact_after", "7"],
                      environ={}) == 2
    assert "--compact_after is not a parameter of the template" in capsys.readouterr().err
