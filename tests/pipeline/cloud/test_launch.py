"""The Dataflow commands (image, dataflow, template, run-template) as `bash launch.sh COMMAND` runs them (it hands
over to pipeline/cloud/, unit-tested in tests/pipeline/cloud/test_cloud.py), proved by their --dry-run output: the exact
commands, one a line, with nothing run and no .venv made. Also the Flex Template metadata (generated from the build
flags, every parameter validated by a regex), the entry point that the template and Airflow call, and the Dockerfile's
pins.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
LAUNCH = ROOT / "launch.sh"
METADATA = ROOT / "pipeline" / "options" / "flex_template_metadata.json"
IMAGE = "europe-west4-docker.pkg.dev/my-project/shardsmith/shardsmith:abc123"
SETTINGS = ("--project", "my-project", "--region", "europe-west4", "--bucket", "my-bucket", "--tag", "abc123",
            "--job_name", "pets-nightly")
BUILD = ("--manifest", "gs://my-bucket/lists/pets.csv", "--output_dir", "gs://my-bucket/datasets/pets",
         "--name", "pets", "--num_shards", "train=16,validation=2,test=2")


def launch(*args: str, env: dict | None = None, cwd: Path | None = None, venv: Path | None = None):
    """Runs `bash launch.sh ARGS` with no SHARDSMITH_* settings inherited from this process."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SHARDSMITH_")}
    clean["SHARDSMITH_VENV"] = str(venv or ROOT / ".no-such-venv")
    clean.update(env or {})
    return subprocess.run(["bash", str(LAUNCH), *args], env=clean, cwd=cwd or ROOT, capture_output=True,
                          text=True, timeout=60)


def only_command(result) -> list[str]:
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout
    return shlex.split(lines[0])


def flags(words: list[str]) -> dict[str, list[str]]:
    """--key=value words -> {key: [values]} (bare --flags map to [''])."""
    found: dict[str, list[str]] = {}
    for word in words:
        if word.startswith("--"):
            key, _, value = word[2:].partition("=")
            found.setdefault(key, []).append(value)
    return found


def test_dataflow_dry_run_prints_the_python_command_with_the_image_and_every_setting(tmp_path):
    venv = tmp_path / "venv"
    result = launch("dataflow", "--dry-run", *SETTINGS,
                    "--service_account", "builder@my-project.iam.gserviceaccount.com", "--machine_type", "n2-highmem-4",
                    "--max_workers", "40", "--num_workers", "4",
                    "--network", "data", "--subnetwork", "regions/europe-west4/subnetworks/data-eu",
                    "--no_public_ips", "--labels", "team=vision,cost-center=ml", *BUILD, "--validate", "header",
                    "--no_wait_until_finish", venv=venv)
    words = only_command(result)
    assert words[:4] == [str(venv / "bin" / "python"), "-m", "pipeline", "build"]
    assert tuple(words[4:4 + len(BUILD) + 3]) == (*BUILD, "--validate", "header", "--no_wait_until_finish")
    found = flags(words[4 + len(BUILD) + 3:])
    assert found == {
        "runner": ["DataflowRunner"],
        "project": ["my-project"],
        "region": ["europe-west4"],
        "temp_location": ["gs://my-bucket/shardsmith/temp"],
        "staging_location": ["gs://my-bucket/shardsmith/staging"],
        "sdk_container_image": [IMAGE],
        "job_name": ["pets-nightly"],
        "service_account_email": ["builder@my-project.iam.gserviceaccount.com"],
        "machine_type": ["n2-highmem-4"],
        "num_workers": ["4"],
        "max_num_workers": ["40"],
        "network": ["data"],
        "subnetwork": ["regions/europe-west4/subnetworks/data-eu"],
        "no_use_public_ips": [""],
        "labels": ["team=vision", "cost-center=ml"],
    }
    assert not venv.exists(), "--dry-run must not create the virtualenv"


def test_dataflow_dry_run_output_is_what_shardsmith_and_beam_accept():
    from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions, WorkerOptions

    from pipeline import cli
    from pipeline.options.arguments import build_options_from

    words = only_command(launch("dataflow", "--dry-run", *SETTINGS, "--no_public_ips", *BUILD))
    args, beam_args = cli._parser().parse_known_args(words[3:])
    assert build_options_from(args).placement.num_shards == (("train", 16), ("validation", 2), ("test", 2))
    beam = PipelineOptions(beam_args)
    assert beam.view_as(GoogleCloudOptions).temp_location == "gs://my-bucket/shardsmith/temp"
    assert beam.view_as(WorkerOptions).sdk_container_image == IMAGE
    assert beam.view_as(WorkerOptions).use_public_ips is False


@pytest.mark.parametrize("missing", ["project", "region", "bucket"])
def test_a_missing_required_setting_is_one_line_and_exit_2(missing, tmp_path):
    given = {"project": "my-project", "region": "europe-west4", "bucket": "my-bucket"}
    del given[missing]
    args = [word for key, value in given.items() for word in (f"--{key}", value)]
    for command in ("dataflow", "template", "run-template"):
        result = launch(command, "--dry-run", *args, *BUILD[:6], venv=tmp_path / "venv")
        assert result.returncode == 2, (command, result.stdout, result.stderr)
        assert result.stdout == ""
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith(f"launch.sh: {command}: missing setting: {missing} ")
        assert f"--{missing}" in lines[0] and f"SHARDSMITH_{missing.upper()}" in lines[0]
    assert not (tmp_path / "venv").exists()


def test_nothing_given_names_all_three_settings():
    result = launch("dataflow", "--dry-run", *BUILD)
    assert result.returncode == 2
    assert "missing setting: project, region, bucket " in result.stderr


def test_explicit_locations_make_the_bucket_unnecessary():
    words = only_command(launch("dataflow", "--dry-run", "--project", "p-1", "--region", "us-east1", "--image", "x/y:z",
                                "--temp_location", "gs://scratch-1/t", "--staging_location", "gs://scratch-1/s",
                                *BUILD))
    assert flags(words)["temp_location"] == ["gs://scratch-1/t"]
    assert flags(words)["sdk_container_image"] == ["x/y:z"]


def test_usage_mistakes_exit_2_with_one_line():
    cases = [
        (("dataflow", *SETTINGS, "--manifest", "/home/me/pets.csv"), "use a gs:// path"),
        (("dataflow", *SETTINGS, "--job_name", "Pets_Nightly"), "--job_name 'Pets_Nightly'"),
        (("dataflow", *SETTINGS, "--max_workers", "many"), "--max_workers must be a positive whole number"),
        (("dataflow", *SETTINGS, "--labels", "Team=Vision"), "label 'Team=Vision'"),
        (("image", "--project", "p-1", "--region", "r", "--builder", "podman"), "--builder must be"),
        (("run-template", *SETTINGS, *BUILD, "--runner", "DirectRunner"), "--runner is not a parameter"),
        (("run-template", *SETTINGS, "--manifest", "gs://my-bucket/m.csv"), "missing --output_dir"),
        (("template", *SETTINGS, "--name", "pets"), "unexpected argument"),
        (("dataflow", *SETTINGS, "--config", "/no/such/file"), "config file not found"),
    ]
    for args, expected in cases:
        result = launch(args[0], "--dry-run", *args[1:])
        assert result.returncode == 2, (args, result.stdout)
        assert len(result.stderr.strip().splitlines()) == 1 and expected in result.stderr, (args, result.stderr)


def test_template_dry_run_builds_the_specs_from_the_image_and_the_metadata_files():
    """Two specs of the one image: the build's, and the compaction's beside it
    (tests/pipeline/test_entrypoint_compact.py)."""
    result = launch("template", "--dry-run", *SETTINGS, "--max_workers", "40", "--no_public_ips")
    assert result.returncode == 0, result.stderr
    commands = [shlex.split(line) for line in result.stdout.splitlines()]
    specs = ("shardsmith-abc123.json", METADATA), ("shardsmith-abc123-compact.json",
                                                  METADATA.with_name("flex_template_compact_metadata.json"))
    assert len(commands) == len(specs)
    for words, (spec, metadata_file) in zip(commands, specs, strict=True):
        assert words[:5] == ["gcloud", "dataflow", "flex-template", "build",
                             f"gs://my-bucket/shardsmith/templates/{spec}"]
        found = flags(words)
        assert found["project"] == ["my-project"]
        assert found["image"] == [IMAGE]
        assert found["sdk-language"] == ["PYTHON"]
        assert found["metadata-file"] == [str(metadata_file)]
        assert found["temp-location"] == ["gs://my-bucket/shardsmith/temp"]
        assert found["staging-location"] == ["gs://my-bucket/shardsmith/staging"]
        assert found["max-workers"] == ["40"] and found["disable-public-ips"] == [""]


def _parameters(words: list[str]) -> dict[str, str]:
    (value,) = flags(words)["parameters"]
    delimiter = ","
    if value.startswith("^"):
        delimiter, value = value[1], value[3:]
    return dict(item.split("=", 1) for item in value.split(delimiter))


def test_run_template_dry_run_turns_build_flags_into_validated_parameters():
    result = launch("run-template", "--dry-run", *SETTINGS, "--labels", "team=vision",
                    "--machine_type", "n2-standard-8",
                    "--manifest", "gs://my-bucket/lists/a.csv", "--manifest=gs://my-bucket/lists/b-*.csv",
                    "--output_dir", "gs://my-bucket/datasets/pets/20260315", "--name", "pets", "--overwrite",
                    "--num_shards", "train=16,validation=2,test=2", "--path_map", "/data=gs://my-bucket/images")
    words = only_command(result)
    assert words[:5] == ["gcloud", "dataflow", "flex-template", "run", "pets-nightly"]
    found = flags(words)
    assert found["template-file-gcs-location"] == ["gs://my-bucket/shardsmith/templates/shardsmith-abc123.json"]
    assert found["region"] == ["europe-west4"] and found["project"] == ["my-project"]
    assert found["worker-machine-type"] == ["n2-standard-8"]
    assert found["additional-user-labels"] == ["team=vision"]
    assert found["temp-location"] == ["gs://my-bucket/shardsmith/temp"]
    parameters = _parameters(words)
    assert parameters == {
        "manifest": "gs://my-bucket/lists/a.csv,gs://my-bucket/lists/b-*.csv",
        "output_dir": "gs://my-bucket/datasets/pets/20260315",
        "name": "pets",
        "overwrite": "true",
        "num_shards": "train=16,validation=2,test=2",
        "path_map": "/data=gs://my-bucket/images",
        "sdk_container_image": IMAGE,
    }
    declared = {p["name"]: p["regexes"] for p in json.loads(METADATA.read_text())["parameters"]}
    for name, value in parameters.items():
        if name != "sdk_container_image":  # a Beam option the launcher passes on, not a template parameter
            assert all(re.fullmatch(regex, value) for regex in declared[name]), (name, value)


def test_run_template_without_commas_uses_gcloud_plain_list_form():
    words = only_command(launch("run-template", "--dry-run", *SETTINGS, *BUILD[:6]))
    (value,) = flags(words)["parameters"]
    assert value == f"manifest=gs://my-bucket/lists/pets.csv,output_dir=gs://my-bucket/datasets/pets,name=pets," \
                    f"sdk_container_image={IMAGE}"


def test_image_dry_run_with_cloud_build_and_with_docker():
    words = only_command(launch("image", "--dry-run", "--project", "my-project", "--region", "europe-west4",
                                "--tag", "abc123"))
    assert words[:4] == ["gcloud", "builds", "submit", str(ROOT)]
    assert flags(words)["tag"] == [IMAGE] and flags(words)["ignore-file"] == [".dockerignore"]
    result = launch("image", "--dry-run", "--builder", "docker", "--image", IMAGE)
    assert result.returncode == 0, result.stderr
    assert [shlex.split(line) for line in result.stdout.splitlines()] == [
        ["docker", "build", "--platform=linux/amd64", f"--tag={IMAGE}", str(ROOT)],
        ["gcloud", "auth", "configure-docker", "europe-west4-docker.pkg.dev", "--quiet"],
        ["docker", "push", IMAGE],
    ]


def test_default_tag_is_the_git_commit_or_the_version():
    words = only_command(launch("image", "--dry-run", "--project", "p-1", "--region", "us-east1"))
    tag = flags(words)["tag"][0].rsplit(":", 1)[1]
    assert re.fullmatch(r"[0-9a-f]{12}|\d+\.\d+\.\d+.*", tag), tag


def test_flags_override_environment_which_overrides_the_config_file(tmp_path):
    config = tmp_path / "shardsmith.env"
    config.write_text(
        "# settings for the nightly build\n"
        "export SHARDSMITH_PROJECT=file-project\n"
        "SHARDSMITH_REGION='file-region'\n"
        'SHARDSMITH_BUCKET="file-bucket"  \n'
        "\n"
        "MACHINE_TYPE=n2-standard-2   # the key without its prefix works too\n"
        "SHARDSMITH_IMAGE_TAG=from-file\n"
    )
    env = {"SHARDSMITH_REGION": "env-region", "SHARDSMITH_BUCKET": "env-bucket", "SHARDSMITH_JOB_NAME": "env-job"}
    words = only_command(launch("dataflow", "--dry-run", "--config", str(config), "--bucket", "flag-bucket", *BUILD,
                                env=env))
    found = flags(words)
    assert found["project"] == ["file-project"]  # file only
    assert found["region"] == ["env-region"]  # environment over file
    assert found["temp_location"] == ["gs://flag-bucket/shardsmith/temp"]  # flag over environment and file
    assert found["job_name"] == ["env-job"]
    assert found["machine_type"] == ["n2-standard-2"]
    assert found["sdk_container_image"] == ["env-region-docker.pkg.dev/file-project/shardsmith/shardsmith:from-file"]

    # SHARDSMITH_CONFIG names the file too, and --dry-run can come from the environment.
    words = only_command(launch("dataflow", *BUILD, env={"SHARDSMITH_CONFIG": str(config), "SHARDSMITH_DRY_RUN": "1"}))
    assert flags(words)["region"] == ["file-region"] and flags(words)["project"] == ["file-project"]


def test_config_file_mistakes_name_the_line(tmp_path):
    bad = tmp_path / "bad.env"
    bad.write_text("SHARDSMITH_PROJECT=p\nSHARDSMITH_REGON=us-east1\n")
    result = launch("dataflow", "--dry-run", "--config", str(bad), *BUILD)
    assert result.returncode == 2 and f"{bad}:2: unknown setting REGON" in result.stderr
    bad.write_text("rm -rf /\n")
    result = launch("dataflow", "--dry-run", "--config", str(bad), *BUILD)
    assert result.returncode == 2 and f"{bad}:1: expected KEY=VALUE" in result.stderr


def test_help_documents_every_command_and_setting():
    result = launch("--help")
    assert result.returncode == 0
    for word in ("image", "dataflow", "template", "run-template", "airflow-env", "demo", "local", "test", "install",
                 "bash launch.sh COMMAND --help"):
        assert word in result.stdout, word
    cloud = launch("dataflow", "--help")  # the cloud commands' own help (pipeline/cloud/help.py)
    assert cloud.returncode == 0 and cloud.stderr == ""
    for word in ("image", "dataflow", "template", "run-template", "--dry-run", "--config", "--no_public_ips",
                 "--no_wait_until_finish", "--max_num_workers", "--service_account_email", "--worker_machine_type",
                 "--sdk_container_image", "--no_use_public_ips", "--manifest, --feature or --path_map",
                 "--overwrite, --break_lock, --verbose, --no_card or --incremental"):
        assert word in cloud.stdout, word
    for key in ("PROJECT", "REGION", "BUCKET", "TEMP_LOCATION", "STAGING_LOCATION", "TEMPLATE_FILE", "IMAGE",
                "REPOSITORY", "IMAGE_TAG", "BUILDER", "SERVICE_ACCOUNT", "MACHINE_TYPE", "MAX_WORKERS",
                "NUM_WORKERS", "NETWORK", "SUBNETWORK", "NO_PUBLIC_IPS", "JOB_NAME", "LABELS", "CONFIG", "DRY_RUN"):
        assert f"SHARDSMITH_{key}" in cloud.stdout, key
    for command in ("image", "template", "run-template"):
        assert launch(command, "--dry-run", "--help").stdout == cloud.stdout
    assert launch().returncode == 2 and launch("nonsense").returncode == 2


# A good and a bad value for every parameter of the Flex Template.
EXAMPLES = {
    "manifest": ("gs://my-bucket/lists/part-*.csv,gs://my-bucket/more.jsonl", "/home/me/manifest.csv"),
    "output_dir": ("gs://my-bucket/datasets/pets/20260315", "gs://My_Bucket/out"),
    "name": ("pets.v2_small-1", "../escape"),
    "split_column": ("Split", "split\nx"),
    "uri_column": ("image uri", ""),
    "label_column": ("label", "1label"),
    "path_map": ("/data/images=gs://my-bucket/images,old=new", "no-equals-sign"),
    "allowed_prefixes": ("gs://my-bucket/images/,gs://other-bucket", "/etc"),
    "split_ratios": ("0.8,0.1,.1", "0.8,0.2"),
    "seed": ("42", "-1"),
    "num_shards": ("train=1024,validation=128,test=128", "train=0"),
    "target_shard_mb": ("128", "-5"),
    "compression": ("gzip", "zip"),
    "image_mode": ("path", "file"),
    "task": ("detection", "boxes"),
    "list_delimiter": ("|", ";;"),
    "normalize_labels": ("nfc", "nfd"),
    "mask_column": ("mask", "a,b"),
    "feature": ("age:int,tags:string_list", "age:integer"),
    "max_side": ("512", "-1"),
    "min_side": ("32", "-1"),
    "reencode": ("jpeg", "webp"),
    "jpeg_quality": ("95", "100"),
    "overwrite": ("true", "yes please"),
    "keep_builds": ("3", "0"),
    "keep_days": ("0.5", "seven"),
    "break_lock": ("false", "maybe"),
    "no_card": ("true", "no"),
    "validate": ("header", "none"),
    "on_duplicate": ("drop", "ignore"),
    "max_error_fraction": ("0.05", "1.5"),
    "incremental": ("true", "yes please"),
    "max_removed_fraction": ("0.1", "-0.1"),
    "max_image_bytes": ("67108864", "64MB"),
    "max_pixels": ("89478485", "0"),
    "temp_dir": ("gs://my-bucket/tmp/tft", "/tmp/tft"),
    "near_duplicates": ("report", "maybe"),
    "near_duplicate_distance": ("8", "17"),
    "verbose": ("true", "loud"),
    "label_file": ("gs://my-bucket/lists/labels.txt", "/tmp/labels.txt"),
}


def test_flex_template_metadata_validates_every_parameter_with_regexes():
    metadata = json.loads(METADATA.read_text())
    assert metadata["name"] and metadata["description"]
    parameters = metadata["parameters"]
    names = [p["name"] for p in parameters]
    assert len(names) == len(set(names))
    assert set(names) == set(EXAMPLES), "every parameter needs a good and a bad example here"
    for parameter in parameters:
        assert parameter["label"] and parameter["helpText"] and isinstance(parameter["isOptional"], bool)
        assert parameter["regexes"], parameter["name"]
        good, bad = EXAMPLES[parameter["name"]]
        for regex in parameter["regexes"]:
            re.compile(regex)
            assert "(?" not in regex, "Dataflow validates with RE2: no lookaround"
            assert re.fullmatch(regex, good), (parameter["name"], good)
            assert not re.fullmatch(regex, bad), (parameter["name"], bad)
    assert {p["name"] for p in parameters if not p["isOptional"]} == {"manifest", "output_dir", "name"}


def test_flex_template_files_are_generated_from_the_build_flags():
    from pipeline.options import flex_template

    for path, text in flex_template.generated().items():
        assert path.read_text() == text, f"{path.name} is out of date with the build flags: run " \
                                         f"`{flex_template.COMMAND}`"


def test_template_parameters_are_the_build_flags():
    from pipeline import cli
    from pipeline.options import flex_template
    from pipeline.options.flags import build_flags

    names = {p["name"] for p in json.loads(METADATA.read_text())["parameters"]}
    subcommands = next(a for a in cli._parser()._actions if isinstance(a, argparse._SubParsersAction))
    build = subcommands.choices["build"]
    local_only = {"writer_processes"}  # remote runners spread shards over their own workers
    flags_of_build = {action.dest for action in build._actions
                      if action.option_strings and action.dest not in {"help", *local_only}}
    assert names == flags_of_build
    seed = next(flag for flag in build_flags() if flag.name == "seed")
    with pytest.raises(ValueError, match="--seed: a free-text parameter needs a regex in its declaration"):
        flex_template.regex_of(seed, dataclasses.replace(seed.template, regex=""))


def test_entrypoint_turns_one_value_parameters_into_build_flags():
    from pipeline.entrypoint import to_build_args

    assert to_build_args([
        "--manifest=gs://b/a.csv, gs://b/b.csv", "--path_map=/x=gs://b/x,/y=gs://b/y", "--overwrite=true",
        "--name=pets", "--runner=DataflowRunner", "--template_location=gs://b/t/job",
    ]) == [
        "--manifest=gs://b/a.csv", "--manifest=gs://b/b.csv", "--path_map=/x=gs://b/x", "--path_map=/y=gs://b/y",
        "--overwrite", "--name=pets", "--runner=DataflowRunner", "--template_location=gs://b/t/job",
    ]
    assert to_build_args(["--overwrite=false", "--overwrite", "--manifest", "gs://b/m.csv"]) == [
        "--overwrite", "--manifest", "gs://b/m.csv"]


def test_build_can_skip_waiting_for_a_remote_job():
    """Waiting until the job finishes is the default (Airflow relies on it); Beam's --no_wait_until_finish
    passes through shardsmith to return once the job is submitted. The job id and console URL in the log, and
    both modes against a Dataflow API stand-in: tests/pipeline/commands/test_gcs_end_to_end.py."""
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

    from pipeline import cli

    _, beam_args = cli._parser().parse_known_args(["build", *BUILD])
    assert PipelineOptions(beam_args).view_as(StandardOptions).no_wait_until_finish is False
    _, beam_args = cli._parser().parse_known_args(["build", *BUILD, "--no_wait_until_finish"])
    assert PipelineOptions(beam_args).view_as(StandardOptions).no_wait_until_finish is True


def test_dockerfile_pins_the_same_python_and_beam_as_pyproject():
    dockerfile = (ROOT / "Dockerfile").read_text()
    beam_pin = re.search(r'"apache-beam\[gcp\]==([0-9.]+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    assert re.search(rf"^ARG BEAM_VERSION={re.escape(beam_pin)}$", dockerfile, re.M)
    assert "FROM apache/beam_python3.11_sdk:${BEAM_VERSION}" in dockerfile
    assert 'requires-python = ">=3.11,<3.12"' in (ROOT / "pyproject.toml").read_text()
    assert "python311-template-launcher-base" in dockerfile
    assert "COPY --from=template_launcher /opt/google/dataflow/python_template_launcher" in dockerfile
    assert "FLEX_TEMPLATE_PYTHON_PY_FILE=/template/main.py" in dockerfile
    assert "from pipeline.entrypoint import main" in dockerfile
    assert 'ENTRYPOINT ["/opt/apache/beam/boot"]' in dockerfile
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".venv", "demo", "**/__pycache__", ".git"} <= set(ignored)


def test_gcloud_accepts_every_printed_command(tmp_path):
    """gcloud parses its arguments before it looks for an account: with an empty configuration folder, a
    printed command fails with "no active account", never with "unrecognized arguments" or a bad value."""
    import shutil

    if shutil.which("gcloud") is None:
        pytest.skip("gcloud is not installed")
    templates = launch("template", "--dry-run", *SETTINGS, "--max_workers", "40", "--no_public_ips",
                       "--labels", "team=vision", "--subnetwork", "regions/europe-west4/subnetworks/s")
    commands = [
        *(shlex.split(line) for line in templates.stdout.splitlines()),
        only_command(launch("run-template", "--dry-run", *SETTINGS, "--num_workers", "2",
                            "--machine_type", "n2-standard-4",
                            "--service_account", "sa@my-project.iam.gserviceaccount.com", *BUILD, "--overwrite")),
        only_command(launch("image", "--dry-run", *SETTINGS[:6])),
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLOUDSDK_", "GOOGLE_"))}
    env.update({"CLOUDSDK_CONFIG": str(tmp_path / "gcloud"), "CLOUDSDK_CORE_DISABLE_PROMPTS": "1",
                "CLOUDSDK_CORE_CHECK_GCE_METADATA": "false"})
    for words in commands:
        assert words[0] == "gcloud"
        done = subprocess.run(words, env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert done.returncode != 0
        assert "You do not currently have an active account selected" in done.stderr, (words, done.stderr)


def test_an_unknown_command_is_one_line_with_the_nearest_command():
    result = launch("dataflw")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == ("launch.sh: unknown command 'dataflw' (did you mean 'dataflow'?); "
                             "see bash launch.sh --help\n")
    far = launch("xyzzy")
    assert far.returncode == 2 and far.stderr == "launch.sh: unknown command 'xyzzy'; see bash launch.sh --help\n"
    assert len((ROOT / "launch.sh").read_text().splitlines()) <= 150
