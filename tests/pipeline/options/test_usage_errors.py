"""A typo'd flag is a usage error with a suggestion, not a flag Beam drops in silence; shardsmith's flags may be
spelled with dashes; argument mistakes are reported before Beam or TensorFlow is imported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pipeline.options import beam_flags

ROOT = Path(__file__).resolve().parents[3]


def test_a_typod_flag_exits_2_with_the_closest_flag_and_builds_nothing(shardsmith, tmp_path, image_set_factory):
    images = image_set_factory(tmp_path, {"a": {"train": 4, "test": 2}, "b": {"train": 4, "test": 2}})
    out = tmp_path / "out"
    result = shardsmith("build", "--manifest", images.manifest, "--output_dir", out, "--name", "x",
                        "--num-shards", "4", "--ouput_dir", tmp_path / "elsewhere", "--max_eror_fraction=0.5")
    assert result.code == 2
    assert result.err.count("\n") == 1 and result.err.startswith("shardsmith: error: unknown flags ")
    assert "--ouput_dir (did you mean --output_dir?)" in result.err
    assert "--max_eror_fraction (did you mean --max_error_fraction?)" in result.err
    assert not out.exists() and not (tmp_path / "elsewhere").exists()


def test_a_typod_beam_flag_is_an_error_too(shardsmith, tmp_path):
    result = shardsmith("build", "--manifest", tmp_path / "m.csv", "--output_dir", tmp_path / "out", "--name",
                        "x", "--runer=DirectRunner")
    assert result.code == 2 and "--runer (did you mean --runner?)" in result.err
    result = shardsmith("build", "--manifest", tmp_path / "m.csv", "--output_dir", tmp_path / "out", "--name",
                        "x", "--direct-num-workers", "1")  # Beam's flags have no dashed spelling
    assert result.code == 2 and "did you mean --direct_num_workers?" in result.err


def test_dashed_spellings_and_beam_flags_build(shardsmith, tmp_path, image_set_factory, metadata_of):
    images = image_set_factory(tmp_path, {"a": {"train": 12, "validation": 4, "test": 4},
                                          "b": {"train": 12, "validation": 4, "test": 4}})
    out = tmp_path / "out"
    result = shardsmith("build", "--manifest", images.manifest, f"--output-dir={out}", "--name", "x",
                        "--num-shards", "4", "--max-error-fraction", "0.1", "--runner=DirectRunner",
                        "--direct_num_workers", "1", "--direct_running_mode=in_memory", "--experiments", "x_y")
    assert result.code == 0, result.err
    metadata = metadata_of(out)
    assert {split: info["num_shards"] for split, info in metadata["splits"].items()} == {
        "train": 4, "validation": 4, "test": 4}
    assert metadata["options"]["max_error_fraction"] == 0.1


def test_a_usage_error_imports_neither_beam_runners_nor_tensorflow(tmp_path):
    code = (
        "import sys\n"
        "from pipeline import cli\n"
        f"status = cli.main(['build', '--manifest', 'm.csv', '--output_dir', {str(tmp_path / 'o')!r}, "
        "'--name', 'x', '--ouput_dir', 'y'])\n"
        "heavy = sorted(m for m in sys.modules if m == 'tensorflow' or m.startswith(('apache_beam.runners', "
        "'tensorflow.')))\n"
        "print(status, len(heavy), heavy[:5])\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env)
    assert done.stdout.split()[:2] == ["2", "0"], done.stdout + done.stderr
    assert "did you mean --output_dir?" in done.stderr
    assert not (tmp_path / "o").exists()


def test_the_beam_flag_list_is_the_installed_beams():
    assert beam_flags.NAMES_FILE.read_text() == beam_flags.generated(), \
        f"{beam_flags.NAMES_FILE.name} is out of date with the installed Beam: run `{beam_flags.COMMAND}`"
    assert {"runner", "project", "temp_location", "experiments", "sdk_container_image", "no_wait_until_finish",
            "job_name", "region", "staging_location", "template_location"} <= beam_flags.names()


def test_help_lists_each_flag_once():
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "build", "--help"], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0 and "--output_dir" in done.stdout and "--output-dir" not in done.stdout


def test_the_options_dataflows_launcher_passes_are_accepted_by_the_entrypoint():
    from pipeline.entrypoint import to_build_args
    from pipeline.options.arguments import normalize_flags, own_flag_names, reject_unknown_flags

    launcher = ["--runner=DataflowRunner", "--project=p", "--region=europe-west4", "--temp_location=gs://b/t",
                "--staging_location=gs://b/s", "--job_name=j", "--template_location=gs://b/t/job",
                "--sdk_container_image=eu.gcr.io/p/i:1", "--service_account_email=a@p.iam.gserviceaccount.com",
                "--labels=app=shardsmith", "--experiments=use_runner_v2", "--setup_file=/x/setup.py"]
    params = ["--manifest=gs://b/a.csv,gs://b/b.csv", "--output_dir=gs://b/out", "--name=pets", "--overwrite=true"]
    args = normalize_flags(to_build_args(params + launcher), own_flag_names())
    reject_unknown_flags(args, own_flag_names(), beam_flags.names())  # raises on any it does not know


def _build_in_a_fresh_process(tmp_path: Path, manifest: Path) -> tuple[list[str], str]:
    code = (
        "import sys\n"
        "from pipeline import cli\n"
        f"status = cli.main(['build', '--manifest', {str(manifest)!r}, '--output_dir', {str(tmp_path / 'o')!r}, "
        "'--name', 'x'])\n"
        "print(status, 'apache_beam' in sys.modules, 'tensorflow' in sys.modules)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env)
    return done.stdout.split(), done.stderr


def test_a_missing_manifest_or_a_wrong_header_is_reported_before_beam_is_imported(tmp_path):
    """Path and header checks come before `import apache_beam` (seconds; measured in docs/building.md)."""
    missing = tmp_path / "missing.csv"
    status, stderr = _build_in_a_fresh_process(tmp_path, missing)
    assert status == ["2", "False", "False"], stderr
    assert stderr == f"shardsmith: error: manifest not found: {missing}\n"
    wrong = tmp_path / "wrong.csv"
    wrong.write_text("split,image_uri,class\ntrain,a.jpg,cat\n")
    status, stderr = _build_in_a_fresh_process(tmp_path, wrong)
    assert status == ["2", "False", "False"], stderr
    assert "--label_column class" in stderr and stderr.count("\n") == 1
    assert not (tmp_path / "o").exists()


def test_a_runner_that_cannot_see_this_disk_refuses_local_paths_naming_the_flag(shardsmith, tmp_path):
    """Dataflow's workers, a DOCKER environment and a job service on another machine never see the launcher's
    files: a local manifest, output folder or --temp_location is exit 2 naming the flag, before any folder is
    made; such a runner also needs tf.transform's scratch folder under --temp_location."""
    out = tmp_path / "out"
    gs = ["--manifest", "gs://b/m.csv", "--output_dir", "gs://b/out", "--name", "x"]
    cases = [
        (["--manifest", tmp_path / "m.csv", "--output_dir", "gs://b/out", "--name", "x",
          "--runner=DataflowRunner", "--temp_location=gs://b/t"], "--manifest"),
        (["--manifest", "gs://b/m.csv", "--output_dir", out, "--name", "x",
          "--runner=apache_beam.runners.dataflow.dataflow_runner.DataflowRunner", "--temp_location=gs://b/t"],
         "--output_dir"),
        ([*gs, "--runner=DataflowRunner", "--temp_location", "tmp"], "--temp_location"),
        ([*gs, "--runner=DataflowRunner"], "--temp_location (or --temp_dir) is needed"),
        (["--manifest", tmp_path / "m.csv", "--output_dir", out, "--name", "x", "--runner=PortableRunner",
          "--job_endpoint=localhost:8099", "--environment_type=DOCKER"], "--manifest"),
        (["--manifest", tmp_path / "m.csv", "--output_dir", out, "--name", "x", "--runner=PortableRunner",
          "--job_endpoint=jobs.example.com:8099", "--environment_type=EXTERNAL"], "--manifest"),
    ]
    for args, flag in cases:
        result = shardsmith("build", *args)
        assert result.code == 2, (args, result.err)
        assert result.err.startswith(f"shardsmith: error: {flag}") and result.err.count("\n") == 1, result.err
    assert not out.exists()


def test_runner_names_are_recognized_short_or_fully_qualified():
    from pipeline.running.runner_names import is_local_runner, sees_launcher_disk

    for name in (None, "DirectRunner", "direct", "FnApiRunner", "SwitchingDirectRunner",
                 "apache_beam.runners.direct.direct_runner.DirectRunner",
                 "apache_beam.runners.direct.direct_runner.SwitchingDirectRunner",
                 "apache_beam.runners.portability.fn_api_runner.FnApiRunner"):
        assert is_local_runner(name), name
    for name in ("DataflowRunner", "PortableRunner", "apache_beam.runners.dataflow.dataflow_runner.DataflowRunner"):
        assert not is_local_runner(name), name
    assert sees_launcher_disk(["--runner=apache_beam.runners.direct.direct_runner.DirectRunner"])
    assert sees_launcher_disk(["--runner=PortableRunner", "--job_endpoint=localhost:8099",
                               "--environment_type=EXTERNAL", "--environment_config=localhost:5000"])
    assert sees_launcher_disk(["--runner", "PortableRunner", "--job_endpoint", "127.0.0.1:8099",
                               "--environment_type", "LOOPBACK"])
    assert not sees_launcher_disk(["--runner=PortableRunner", "--job_endpoint=localhost:8099"])  # DOCKER default
    assert not sees_launcher_disk(["--runner=PortableRunner", "--job_endpoint=10.0.0.2:8099",
                                   "--environment_type=EXTERNAL"])
    assert not sees_launcher_disk(["--runner=DataflowRunner"])
    # Beam's own defaults when --environment_type is not given: LOOPBACK for Prism and local Flink/Spark.
    assert sees_launcher_disk(["--runner=PrismRunner"]) and sees_launcher_disk(["--runner=FlinkRunner"])
    assert sees_launcher_disk(["--runner=SparkRunner", "--spark_master_url=local[2]"])
    assert not sees_launcher_disk(["--runner=FlinkRunner", "--flink_master=flink.example.com:8081"])
    assert not sees_launcher_disk(["--runner=PrismRunner", "--environment_type=DOCKER"])


def _cli(*argv: str) -> subprocess.CompletedProcess:
    """`shardsmith ARGV` in a fresh process, as a user or a schedule runs it."""
    return subprocess.run([sys.executable, "-m", "pipeline", *map(str, argv)], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_an_abbreviated_flag_is_a_usage_error_naming_it_not_the_flag_it_begins(tmp_path):
    """argparse's prefix matching took `--num_shard 4` as `--num_shards 4`; a schedule's typo must fail instead."""
    out = tmp_path / "out"
    done = _cli("build", "--manifest", tmp_path / "m.csv", "--output_dir", out, "--name", "x", "--num_shard", "4")
    assert done.returncode == 2, done.stderr
    assert done.stderr == ("shardsmith: error: unknown flag --num_shard (did you mean --num_shards?); `shardsmith "
                           "build --help` lists shardsmith's flags, other flags must be Apache Beam's\n")
    done = _cli("build", "--manifest", tmp_path / "m.csv", "--output_dir", out, "--name", "x", "--runne=Direct")
    assert done.returncode == 2 and "unknown flag --runne (did you mean --runner?)" in done.stderr
    done = _cli("compact", out, "--keep_build", "3")
    assert done.returncode == 2 and done.stderr.startswith("shardsmith: error: compact: unknown flag --keep_build")
    for command, abbreviated in (("verify", "--sampl"), ("inspect", "--contact"), ("versions", "--jso"),
                                 ("index", "--verb")):
        done = _cli(command, out, abbreviated, *(["1"] if command == "verify" else []))
        assert done.returncode == 2 and f"unrecognized arguments: {abbreviated}" in done.stderr, (command, done)
    assert not out.exists()


def test_the_flex_template_entry_point_and_the_cloud_launchers_check_refuse_an_abbreviation_too(tmp_path, capsys):
    from pipeline.entrypoint import main as entrypoint_main
    from pipeline.options.check import check_build_arguments
    from shardsmith.errors import UsageError

    args = [f"--manifest={tmp_path / 'm.csv'}", f"--output_dir={tmp_path / 'out'}", "--name=x"]
    assert entrypoint_main([*args, "--num_shard=4"]) == 2
    assert "unknown flag --num_shard (did you mean --num_shards?)" in capsys.readouterr().err
    try:
        check_build_arguments([*args, "--max_error=0.5"])
    except UsageError as e:
        assert "--max_error (did you mean --max_error_fraction?)" in str(e)
    else:
        raise AssertionError("--max_error was taken as --max_error_fraction")
