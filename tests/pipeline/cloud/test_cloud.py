"""pipeline/cloud/ piece by piece: the config file, the command line, settings precedence and checks, run-template's
parameters and gcloud's list escaping, shell quoting of dry runs, running steps, and the `shardsmith` entry.
The commands' end-to-end output through `bash launch.sh` is tests/pipeline/cloud/test_launch.py's.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.cloud import UsageError
from pipeline.cloud.cli import main as cloud_main
from pipeline.cloud.config_file import read_config
from pipeline.cloud.settings import KEYS, gather, parse_command_line, resolve
from pipeline.cloud.steps import run_steps, show
from pipeline.cloud.template_parameters import Template, parameters_flag, template_parameters

ROOT = Path(__file__).resolve().parents[3]
REQUIRED = {"PROJECT": "my-project", "REGION": "europe-west4", "BUCKET": "my-bucket"}


def values(**given: str) -> dict[str, str]:
    return gather({key.upper(): value for key, value in given.items()}, {}, {})


def test_config_file_reads_shell_style_lines(tmp_path):
    config = tmp_path / "shardsmith.env"
    config.write_bytes(
        b"  # a comment\n\n"
        b"export SHARDSMITH_PROJECT=p-1\n"
        b"REGION='us-east1' \r\n"
        b'SHARDSMITH_LABELS="team=a # not a comment"\n'
        b"MACHINE_TYPE=n2-standard-4   # a comment\n"
        b"SHARDSMITH_NETWORK=net#1\n"
        b"SHARDSMITH_PROJECT=p-2\n"
        b"JOB_NAME=nightly"  # no newline at the end
    )
    assert read_config(str(config), KEYS) == {
        "PROJECT": "p-2", "REGION": "us-east1", "LABELS": "team=a # not a comment", "MACHINE_TYPE": "n2-standard-4",
        "NETWORK": "net#1", "JOB_NAME": "nightly"}


@pytest.mark.parametrize("text, message", [
    ("PROJECT=p\nif true; then\n", ":2: expected KEY=VALUE, got: if true; then"),
    ("PROJECT=p\n\n# c\nSHARDSMITH_DRY_RUN=true\n", ":4: unknown setting DRY_RUN"),
    ("export PROJECT p\n", ":1: expected KEY=VALUE"),
])
def test_config_file_mistakes_name_file_and_line(tmp_path, text, message):
    config = tmp_path / "bad.env"
    config.write_text(text)
    with pytest.raises(UsageError, match="^" + re.escape(str(config) + message)):
        read_config(str(config), KEYS)


def test_config_file_that_cannot_be_read(tmp_path):
    with pytest.raises(UsageError, match="config file not found"):
        read_config(str(tmp_path), KEYS)  # a folder
    (tmp_path / "latin1.env").write_bytes(b"PROJECT=caf\xe9\n")
    with pytest.raises(UsageError, match="cannot read it as UTF-8"):
        read_config(str(tmp_path / "latin1.env"), KEYS)


def test_command_line_takes_settings_and_passes_the_rest_in_order():
    line = parse_command_line([
        "--project", "p-1", "--temp-location=gs://t/x", "--manifest", "gs://b/m.csv", "--max_num_workers", "9",
        "--labels", "a=1", "--labels=b=2", "--no_use_public_ips=no", "--config", "f.env", "--dry_run", "pets",
        "--", "--project", "q",
    ])
    assert line.flags == {"PROJECT": "p-1", "TEMP_LOCATION": "gs://t/x", "MAX_WORKERS": "9", "LABELS": "a=1,b=2",
                          "NO_PUBLIC_IPS": "false"}
    assert line.passed == ["--manifest", "gs://b/m.csv", "pets", "--project", "q"]
    assert line.config == "f.env" and line.dry_run and not line.help
    assert parse_command_line(["--name", "x", "-h", "--project"]).help
    assert parse_command_line(["--no_public_ips"]).flags == {"NO_PUBLIC_IPS": "true"}
    with pytest.raises(UsageError, match="^--region needs a value$"):
        parse_command_line(["--region"])
    with pytest.raises(UsageError, match="^--config needs a file$"):
        parse_command_line(["--config"])


def test_flag_beats_environment_beats_config_file_and_empty_counts_as_unset():
    flags = {"PROJECT": "flag", "REGION": ""}
    environ = {"SHARDSMITH_PROJECT": "env", "SHARDSMITH_REGION": "env", "SHARDSMITH_BUCKET": "", "PROJECT": "no"}
    config = {"PROJECT": "file", "REGION": "file", "BUCKET": "file", "IMAGE": "file"}
    got = gather(flags, environ, config)
    assert (got["PROJECT"], got["REGION"], got["BUCKET"], got["IMAGE"], got["NETWORK"]) == \
           ("flag", "env", "file", "file", "")


def test_resolve_fills_in_the_defaults():
    settings = resolve("dataflow", values(project="p-1", region="us-east1", bucket="gs://my-bucket/"), lambda: "abc")
    assert settings.bucket == "my-bucket"
    assert settings.temp_location == "gs://my-bucket/shardsmith/temp"
    assert settings.template_file == "gs://my-bucket/shardsmith/templates/shardsmith-abc.json"
    assert settings.image == "us-east1-docker.pkg.dev/p-1/shardsmith/shardsmith:abc"
    assert settings.builder == "cloudbuild" and settings.no_public_ips is False
    assert settings.job_name.startswith("shardsmith-") and len(settings.job_name) == len("shardsmith-20260315-030000")


def test_resolve_asks_only_for_what_the_command_needs():
    def missing(command: str, **given: str) -> str:
        with pytest.raises(UsageError) as error:
            resolve(command, values(**given), lambda: "abc")
        return str(error.value).split(" (")[0]

    assert missing("image") == "missing setting: project, region"
    assert missing("image", builder="docker") == "missing setting: project"
    resolve("image", values(builder="docker", image="registry.example/shardsmith:1"), lambda: "abc")
    assert missing("template", project="p-1", region="r") == "missing setting: bucket"
    resolve("template", values(project="p-1", region="r", template_file="gs://tmpl/t.json"), lambda: "abc")
    assert missing("run-template", project="p-1", region="r", template_file="gs://tmpl/t.json") == \
           "missing setting: bucket"


@pytest.mark.parametrize("given, message", [
    ({"job_name": "Nightly"}, "--job_name 'Nightly' must be lowercase"),
    ({"temp_location": "/tmp/x"}, "'/tmp/x' must be a gs://BUCKET/PATH location"),
    ({"num_workers": "0"}, "--num_workers must be a positive whole number, got '0'"),
    ({"labels": "team=a,,b=c"}, "label '' must be key=value"),
    ({"builder": "kaniko"}, "--builder must be cloudbuild or docker"),
])
def test_resolve_refuses_what_dataflow_would(given, message):
    with pytest.raises(UsageError, match=message):
        resolve("dataflow", values(**{k.lower(): v for k, v in REQUIRED.items()}, **given), lambda: "abc")


TEMPLATE = Template.load()


def test_template_parameters_from_build_flags():
    items = template_parameters(["--manifest", "gs://b/a.csv", "--name=one", "--overwrite", "--output_dir", "gs://b/o",
                                 "--manifest=gs://b/b.csv", "--name", "two", "--break_lock=false"], TEMPLATE)
    assert items == ["manifest=gs://b/a.csv,gs://b/b.csv", "name=two", "overwrite=true", "output_dir=gs://b/o",
                     "break_lock=false"]


def test_every_parameter_of_the_template_passes():
    items = template_parameters([f"--{name}=x" for name in TEMPLATE.names], TEMPLATE)
    assert [item.split("=")[0] for item in items] == list(TEMPLATE.names)


@pytest.mark.parametrize("args, message", [
    (["--manifest", "gs://b/m.csv", "--name", "n"], r"missing --output_dir \(a required template parameter\)"),
    (["pets"], "unexpected argument: pets"),
    (["--writer_processes", "4"], "--writer_processes is not a parameter of the template"),
    (["--seed"], "--seed needs a value"),
])
def test_template_parameter_mistakes(args, message):
    with pytest.raises(UsageError, match=message):
        template_parameters(args, TEMPLATE)


def test_template_knows_the_generated_lists_and_switches():
    from pipeline.options.flags import BOOLEAN, LIST, names_of

    assert TEMPLATE.lists == names_of(LIST) and TEMPLATE.switches == names_of(BOOLEAN)
    assert TEMPLATE.required == ("manifest", "output_dir", "name")


def _split_parameters(flag: str) -> list[str]:
    value = flag.removeprefix("--parameters=")
    delimiter = ","
    if value.startswith("^"):
        delimiter, value = value[1], value[3:]
    return value.split(delimiter)


@pytest.mark.parametrize("items, form", [
    (["a=1", "b=x y"], "--parameters=a=1,b=x y"),
    (["a=1,2", "b=3"], "--parameters=^~^a=1,2~b=3"),
    (["a=1,2", "b=~3"], "--parameters=^;^a=1,2;b=~3"),
])
def test_parameters_flag_reads_back_as_the_items(items, form):
    assert parameters_flag(items) == form
    assert _split_parameters(form) == items


def test_parameters_flag_gives_up_only_when_every_delimiter_is_taken():
    with pytest.raises(UsageError, match="every delimiter"):
        parameters_flag(["a=1,~;#|@"])


def test_dry_run_lines_read_back_as_the_same_words():
    words = ["gcloud", "", "two words", "it's", "$HOME", "*.csv", "^~^a,b", "tab\there", "line\nbreak", "ünï", "a=b"]
    line = show(words)
    assert "\n" not in line.replace("line\nbreak", "")
    assert shlex.split(line) == words
    assert show(["--parameters=^~^a=1,2~b=3", "--tag=x/y:z"]) == "'--parameters=^~^a=1,2~b=3' --tag=x/y:z"


def test_steps_run_in_order_and_stop_at_the_first_failure(tmp_path, capfd):
    marker = tmp_path / "third-ran"
    steps = [[sys.executable, "-c", "print('first')"], [sys.executable, "-c", "raise SystemExit(3)"],
             [sys.executable, "-c", f"open({str(marker)!r}, 'w')"]]
    assert run_steps(steps, "prog", dry_run=False) == 3
    out, err = capfd.readouterr()
    assert out == "first\n" and not marker.exists()
    assert err.splitlines() == [f"prog: {show(step)}" for step in steps[:2]]
    assert run_steps([["no-such-program-shardsmith"]], "prog", dry_run=False) == 127
    assert "no-such-program-shardsmith: command not found" in capfd.readouterr().err
    killed = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"]
    assert run_steps([killed], "prog", dry_run=False) == 128 + 15
    assert run_steps(steps, "prog", dry_run=True) == 0 and not marker.exists()
    assert capfd.readouterr().out.splitlines() == [show(step) for step in steps]


def _recorder(path: Path, log: Path, status: int = 0) -> Path:
    """A stand-in program that appends its name and arguments to `log`."""
    path.write_text(f"#!/bin/sh\necho \"$(basename \"$0\") $*\" >> {shlex.quote(str(log))}\nexit {status}\n")
    path.chmod(0o755)
    return path


ENV = {f"SHARDSMITH_{key}": value for key, value in REQUIRED.items()} | {"SHARDSMITH_IMAGE_TAG": "abc"}
BUILD = ["--manifest", "gs://my-bucket/m.csv", "--output_dir", "gs://my-bucket/out", "--name", "pets"]


def test_a_real_dataflow_run_has_the_launcher_install_then_runs_the_build(tmp_path):
    log = tmp_path / "log"
    python, launcher = _recorder(tmp_path / "python", log), _recorder(tmp_path / "launch.sh", log)
    assert cloud_main(["dataflow", *BUILD], "launch.sh", str(python), str(launcher), ENV) == 0
    install, build = log.read_text().splitlines()
    assert install == "launch.sh install"
    assert build.startswith("python -m pipeline build --manifest gs://my-bucket/m.csv ")
    assert "--runner=DataflowRunner" in build

    log.unlink()
    _recorder(launcher, log, status=5)
    assert cloud_main(["dataflow", *BUILD], "launch.sh", str(python), str(launcher), ENV) == 5
    assert log.read_text().splitlines() == ["launch.sh install"]  # no build without its .venv
    log.unlink()
    assert cloud_main(["dataflow", "--dry-run", *BUILD], "launch.sh", str(python), str(launcher), ENV) == 0
    assert not log.exists()  # a dry run installs nothing
    assert cloud_main(["dataflow", *BUILD, "--job_name", "BAD"], "launch.sh", str(python), str(launcher), ENV) == 2
    assert not log.exists()  # a mistake is reported before the install


def _shardsmith(*args: str, python: list[str] | None = None, settings: dict | None = None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHARDSMITH_")} | {"PYTHONPATH": str(ROOT)}
    env |= ENV if settings is None else settings
    return subprocess.run([*(python or [sys.executable]), *args], env=env, capture_output=True, text=True,
                          timeout=60, cwd=ROOT)


def test_shardsmith_cloud_commands_import_neither_beam_nor_tensorflow():
    code = ("import sys; from pipeline.cli import main; status = main(sys.argv[1:]); "
            "print(sorted(m for m in ('apache_beam', 'tensorflow') if m in sys.modules), status)")
    done = _shardsmith("-c", code, "dataflow", "--dry-run", *BUILD)
    assert done.stdout.splitlines()[-1] == "[] 0", done.stderr
    assert done.stdout.splitlines()[0].startswith(f"{sys.executable} -m pipeline build --manifest")


def test_the_cloud_package_runs_on_the_bare_standard_library():
    """python -S: no site-packages at all, as for launch.sh on a machine without .venv."""
    done = _shardsmith("-m", "pipeline.cloud", "--launcher=/x/launch.sh", "--python=/v/bin/python", "run-template",
                       "--dry-run", *BUILD, "--overwrite", python=[sys.executable, "-S"])
    assert done.returncode == 0, done.stderr
    assert shlex.split(done.stdout)[:4] == ["gcloud", "dataflow", "flex-template", "run"]
    done = _shardsmith("-m", "pipeline.cloud", "--launcher=/x/launch.sh", "dataflow", "--job_name", "X",
                       python=[sys.executable, "-S"])
    assert done.returncode == 2 and done.stderr.startswith("launch.sh: dataflow: --job_name 'X'")


def test_shardsmith_lists_and_runs_the_cloud_commands():
    done = _shardsmith("-m", "pipeline", "--help")
    assert done.returncode == 0
    for command in ("image", "dataflow", "template", "run-template"):
        assert f"    {command}  " in done.stdout, command
    assert "shardsmith COMMAND --help" in done.stdout
    done = _shardsmith("-m", "pipeline", "template", "--dry-run", "--region", "r", "--bucket", "my-bucket",
                       settings={})
    assert done.returncode == 2
    assert done.stderr == "shardsmith: template: missing setting: project (pass --project; or set " \
                          "SHARDSMITH_PROJECT; or put it in a --config file)\n"
    done = _shardsmith("-m", "pipeline", "image", "--help")
    assert done.returncode == 0 and done.stdout.startswith("usage: shardsmith {image,dataflow,template,run-template}")


@pytest.mark.parametrize("extra, message", [
    ([], None),
    (["--num-shards", "4", "--verbose"], None),
    (["--ouput_dir", "gs://my-bucket/x"], "build: unknown flag --ouput_dir (did you mean --output_dir?)"),
    (["--max_error_fraction", "2"], "build: --max_error_fraction must be between 0 and 1"),
])
def test_the_dataflow_dry_run_checks_the_build_arguments_as_a_real_run(extra, message):
    """On the bare standard library (launch.sh before .venv), as the build itself would check them."""
    done = _shardsmith("-m", "pipeline.cloud", "dataflow", "--dry-run", *BUILD, *extra, python=[sys.executable, "-S"])
    if message is None:
        assert done.returncode == 0, done.stderr
        build = shlex.split(done.stdout)
        assert build[build.index("--manifest") + 1] == "gs://my-bucket/m.csv"
        assert all(arg in build for arg in extra)
    else:
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr.startswith(f"shardsmith: dataflow: {message}") and done.stderr.count("\n") == 1


def test_the_dataflow_dry_run_without_a_manifest_is_a_usage_error():
    done = _shardsmith("-m", "pipeline.cloud", "dataflow", "--dry-run", *BUILD[2:], python=[sys.executable, "-S"])
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == "shardsmith: dataflow: build: the following arguments are required: --manifest\n"
