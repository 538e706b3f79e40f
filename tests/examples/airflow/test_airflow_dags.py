"""The example Airflow DAGs (examples/airflow/) load in a real Airflow and render what they would launch.

Airflow's Google provider needs google-api-python-client >=2 and tensorflow-transform's tfx-bsl needs <2, so
Airflow lives in its own virtualenv (`bash launch.sh airflow-env` makes .venv-airflow; SHARDSMITH_AIRFLOW_VENV
points elsewhere). A script runs there (DagBag import, tasks, dependencies, schedule, templates rendered for a
given logical date, the Beam operator's command line) and prints JSON; this side checks it, and checks what the
DAGs would launch against shardsmith itself: the Beam command with shardsmith's and Beam's own parsers, the
Flex Template parameters with the regexes of pipeline/options/flex_template_metadata.json.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DAGS = ROOT / "examples" / "airflow"
LOGICAL_DATE = "2026-03-15T03:00:00+00:00"
SETTINGS = {
    "SHARDSMITH_PROJECT": "test-project",
    "SHARDSMITH_REGION": "europe-west4",
    "SHARDSMITH_BUCKET": "test-bucket",
    "SHARDSMITH_IMAGE": "europe-west4-docker.pkg.dev/test-project/shardsmith/shardsmith:abc123",
    "SHARDSMITH_TEMPLATE_FILE": "gs://test-bucket/shardsmith/templates/shardsmith-abc123.json",
    "SHARDSMITH_MANIFEST": "gs://test-bucket/manifests/pets.csv",
    "SHARDSMITH_OUTPUT_ROOT": "gs://test-bucket/datasets/pets",
    "SHARDSMITH_NAME": "pets",
    "SHARDSMITH_PYTHON": "/opt/shardsmith/.venv/bin/python",
}

SCRIPT = r'''
import json, sys
import pendulum
try:
    from airflow.dag_processing.dagbag import DagBag
except ImportError:  # Airflow < 3.1
    from airflow.models.dagbag import DagBag
from airflow.providers.apache.beam.hooks.beam import beam_options_to_args

dags_folder, logical_date = sys.argv[1], pendulum.parse(sys.argv[2])
bag = DagBag(dag_folder=dags_folder)
result = {"import_errors": {str(k): str(v) for k, v in bag.import_errors.items()}, "dags": {}}
for dag_id, dag in sorted(bag.dags.items()):
    tasks = {}
    for task in dag.tasks:
        context = {"ds": logical_date.to_date_string(), "ds_nodash": logical_date.format("YYYYMMDD"),
                   "logical_date": logical_date, "dag": dag, "task": task, "params": {}}
        task.render_template_fields(context)
        info = {"type": type(task).__name__, "upstream": sorted(task.upstream_task_ids),
                "downstream": sorted(task.downstream_task_ids), "retries": task.retries}
        if type(task).__name__ == "DataflowStartFlexTemplateOperator":
            info["body"], info["location"], info["project_id"] = task.body, task.location, task.project_id
            info["wait_until_finished"] = task.wait_until_finished
        elif type(task).__name__ == "BeamRunPythonPipelineOperator":
            # The operator's own option handling (job name, project, region from DataflowConfiguration),
            # then the command line its hook would start.
            task._cast_dataflow_config()
            _, job_name, options, _, _ = task._init_pipeline_options(
                format_pipeline_options=True, job_name_variable_key="job_name")
            options = dict(options)
            if "labels" in options:
                options["labels"] = [f"{k}={v}" for k, v in options["labels"].items()]
            info["job_name"] = job_name
            info["wait_until_finished"] = task.dataflow_config.wait_until_finished
            info["command"] = [task.py_interpreter, *task.py_options, task.py_file, f"--runner={task.runner}",
                               *beam_options_to_args(options)]
        else:
            info["fields"] = {f: getattr(task, f) for f in task.template_fields}
        tasks[task.task_id] = info
    result["dags"][dag_id] = {"schedule": str(dag.schedule), "catchup": dag.catchup,
                              "max_active_runs": dag.max_active_runs, "tasks": tasks}
print("RESULT " + json.dumps(result, default=str))
'''


AIRFLOW_VENV = ("SHARDSMITH_AIRFLOW_VENV", ".venv-airflow", "airflow-env")


@pytest.fixture(scope="module")
def loaded(tmp_path_factory, side_venv) -> dict:
    python = side_venv(*AIRFLOW_VENV)
    home = tmp_path_factory.mktemp("airflow_home")
    script = home / "load_dags.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHARDSMITH_", "AIRFLOW"))}
    env.update(SETTINGS)
    env.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        # A connection record only: nothing here talks to Google.
        "AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT": json.dumps({"conn_type": "google_cloud_platform"}),
        "NO_GCE_CHECK": "true",
    })
    done = subprocess.run([str(python), str(script), str(DAGS), LOGICAL_DATE], env=env, cwd=home,
                          capture_output=True, text=True, timeout=300)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    return json.loads(lines[-1][len("RESULT "):])


def test_dags_import_without_errors(loaded):
    assert loaded["import_errors"] == {}
    assert set(loaded["dags"]) == {"shardsmith_flex_template", "shardsmith_beam_dataflow", "shardsmith_incremental"}
    for dag_id, dag in loaded["dags"].items():
        assert dag["schedule"] == "0 3 * * *"
        assert dag["catchup"] is False and dag["max_active_runs"] == 1
        tasks = dag["tasks"]
        compacts = dag_id == "shardsmith_incremental"
        assert set(tasks) == {"build_tfrecords", "check_metadata_json",
                              *(("compaction_due", "compact_versions") if compacts else ())}
        assert tasks["build_tfrecords"]["downstream"] == ["check_metadata_json"]
        assert tasks["check_metadata_json"]["upstream"] == ["build_tfrecords"]
        assert tasks["check_metadata_json"]["downstream"] == (["compaction_due"] if compacts else [])
        assert tasks["build_tfrecords"]["retries"] == 2
        sensor = tasks["check_metadata_json"]
        assert sensor["type"] == "GCSObjectExistenceSensor"
        assert sensor["fields"]["bucket"] == "test-bucket"
        folder = "datasets/pets" if dag_id == "shardsmith_incremental" else "datasets/pets/20260315"
        assert sensor["fields"]["object"] == f"{folder}/metadata.json"


@pytest.mark.parametrize(("dag_id", "job", "output_dir"), [
    ("shardsmith_flex_template", "shardsmith-20260315", "gs://test-bucket/datasets/pets/20260315"),
    ("shardsmith_incremental", "shardsmith-incremental-20260315", "gs://test-bucket/datasets/pets"),
])
def test_flex_template_dag_renders_valid_template_parameters(loaded, dag_id, job, output_dir):
    task = loaded["dags"][dag_id]["tasks"]["build_tfrecords"]
    assert task["type"] == "DataflowStartFlexTemplateOperator"
    assert task["project_id"] == "test-project" and task["location"] == "europe-west4"
    assert task["wait_until_finished"] is True
    launch = task["body"]["launchParameter"]
    assert launch["jobName"] == job
    assert launch["containerSpecGcsPath"] == SETTINGS["SHARDSMITH_TEMPLATE_FILE"]
    parameters = dict(launch["parameters"])
    assert parameters.pop("sdk_container_image") == SETTINGS["SHARDSMITH_IMAGE"]
    assert parameters["output_dir"] == output_dir
    assert parameters["manifest"] == SETTINGS["SHARDSMITH_MANIFEST"]
    assert (parameters.get("incremental"), parameters.get("keep_builds")) == (
        ("true", "7") if dag_id == "shardsmith_incremental" else (None, None))
    metadata_file = ROOT / "pipeline" / "options" / "flex_template_metadata.json"
    declared = {p["name"]: p for p in json.loads(metadata_file.read_text())["parameters"]}
    assert set(parameters) <= set(declared)
    assert {name for name, p in declared.items() if not p["isOptional"]} <= set(parameters)
    for name, value in parameters.items():
        assert all(re.fullmatch(regex, value) for regex in declared[name]["regexes"]), (name, value)
    environment = launch["environment"]
    assert environment["tempLocation"] == "gs://test-bucket/shardsmith/temp"
    assert environment["stagingLocation"] == "gs://test-bucket/shardsmith/staging"
    assert environment["additionalUserLabels"] == {"app": "shardsmith", "dataset": "pets"}


def test_beam_dag_command_is_accepted_by_shardsmith_and_beam(loaded):
    from apache_beam.options.pipeline_options import (
        GoogleCloudOptions,
        PipelineOptions,
        StandardOptions,
        WorkerOptions,
    )

    from pipeline import cli
    from pipeline.entrypoint import to_build_args
    from pipeline.options.arguments import build_options_from

    task = loaded["dags"]["shardsmith_beam_dataflow"]["tasks"]["build_tfrecords"]
    assert task["type"] == "BeamRunPythonPipelineOperator"
    assert task["wait_until_finished"] is True
    command = task["command"]
    assert command[:3] == [SETTINGS["SHARDSMITH_PYTHON"], "-m", "pipeline.entrypoint"]
    assert re.fullmatch(r"shardsmith-20260315-[0-9a-f]{8}", task["job_name"])

    # What `python -m pipeline.entrypoint ARGS` does with these arguments, short of running the job.
    args, beam_args = cli._parser().parse_known_args(["build", *to_build_args(command[3:])])
    options = build_options_from(args)
    assert options.manifests == (SETTINGS["SHARDSMITH_MANIFEST"],)
    assert options.output_dir == "gs://test-bucket/datasets/pets/20260315"
    assert options.name == "pets" and options.checks.max_error_fraction == 0.05
    beam = PipelineOptions(beam_args)
    assert beam.view_as(StandardOptions).runner == "DataflowRunner"
    cloud = beam.view_as(GoogleCloudOptions)
    assert (cloud.project, cloud.region, cloud.job_name) == ("test-project", "europe-west4", task["job_name"])
    assert cloud.temp_location == "gs://test-bucket/shardsmith/temp"
    assert cloud.staging_location == "gs://test-bucket/shardsmith/staging"
    assert sorted(cloud.labels) == ["app=shardsmith", "dataset=pets"]
    workers = beam.view_as(WorkerOptions)
    assert workers.sdk_container_image == SETTINGS["SHARDSMITH_IMAGE"]
    assert (workers.machine_type, workers.max_num_workers) == ("n2-standard-4", 20)


def _template_parameters_pass(parameters: dict, metadata_file: Path) -> None:
    """Every parameter is declared by the spec's metadata file and matches its regexes; every required one is given."""
    declared = {p["name"]: p for p in json.loads(metadata_file.read_text())["parameters"]}
    assert set(parameters) <= set(declared)
    assert {name for name, p in declared.items() if not p["isOptional"]} <= set(parameters)
    for name, value in parameters.items():
        assert all(re.fullmatch(regex, value) for regex in declared[name]["regexes"]), (name, value)


def test_the_incremental_dag_compacts_after_the_build_when_shardsmiths_rule_says_so(loaded):
    """build -> metadata.json -> compaction_due (shardsmith's --compact_after rule on the published metadata.json)
    -> compact_versions (the compaction template on the same folder, with the same K: a rerun after it published
    writes nothing). Not retried: the next night's check finds a failed compaction still due."""
    tasks = loaded["dags"]["shardsmith_incremental"]["tasks"]
    due, compact = tasks["compaction_due"], tasks["compact_versions"]
    assert due["type"] == "ShortCircuitOperator"
    assert due["upstream"] == ["check_metadata_json"] and due["downstream"] == ["compact_versions"]
    assert due["fields"]["op_kwargs"] == {"bucket": "test-bucket", "metadata_object": "datasets/pets/metadata.json",
                                          "compact_after": "7"}
    assert compact["type"] == "DataflowStartFlexTemplateOperator"
    assert compact["upstream"] == ["compaction_due"] and compact["downstream"] == []
    assert compact["retries"] == 0 and compact["wait_until_finished"] is True
    assert (compact["project_id"], compact["location"]) == ("test-project", "europe-west4")
    launch = compact["body"]["launchParameter"]
    assert launch["jobName"] == "shardsmith-compact-incremental-20260315"
    assert launch["containerSpecGcsPath"] == "gs://test-bucket/shardsmith/templates/shardsmith-abc123-compact.json"
    parameters = dict(launch["parameters"])
    assert parameters.pop("sdk_container_image") == SETTINGS["SHARDSMITH_IMAGE"]
    assert parameters == {"command": "compact", "output_dir": "gs://test-bucket/datasets/pets", "compact_after": "7",
                          "keep_builds": "7"}
    _template_parameters_pass(parameters, ROOT / "pipeline" / "options" / "flex_template_compact_metadata.json")
    build = tasks["build_tfrecords"]["body"]["launchParameter"]
    assert launch["environment"] == build["environment"]


def test_the_dags_compaction_rule_is_shardsmiths(tmp_path, side_venv):
    """compaction_due, run in Airflow's environment on metadata.json files whose shard names shardsmith makes:
    due exactly when some split's shards come from more than K generations (shardsmith's most_generations)."""
    from shardsmith.format.naming import shard_file_name

    def metadata(generations: dict[str, list[int]]) -> str:
        return json.dumps({"splits": {split: {"shards": [{"file": shard_file_name("pets", split, n, 2, "gzip", g)}
                                                         for g in gens for n in range(2)]}
                                      for split, gens in generations.items()}})

    cases = [({"train": [1], "validation": [1]}, 1, False),
             ({"train": [1, 2, 3], "validation": [1, 3]}, 2, True),
             ({"train": [1, 2, 3], "validation": [1, 3]}, 3, False),
             ({"train": [4], "validation": [2, 3], "test": [1, 2, 3, 4, 5, 6, 7, 8]}, 7, True),
             ({"train": [12, 13], "test": [1]}, 2, False)]
    script = tmp_path / "rule.py"
    script.write_text(
        "import importlib.util, json, sys\n"
        "spec = importlib.util.spec_from_file_location('dag', sys.argv[1])\n"
        "dag = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(dag)\n"
        "print(json.dumps([dag.compaction_due(text, k) for text, k in json.loads(sys.stdin.read())]))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHARDSMITH_", "AIRFLOW"))}
    env.update({"AIRFLOW_HOME": str(tmp_path), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"})
    done = subprocess.run([str(side_venv(*AIRFLOW_VENV)), str(script), str(DAGS / "shardsmith_flex_template_dag.py")],
                          input=json.dumps([(metadata(gens), k) for gens, k, _ in cases]), env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [due for _, _, due in cases]


def test_the_incremental_dags_nights_survive_broken_rows_a_quiet_night_and_a_retried_task(loaded, label_sorted_set,
                                                                                          shardsmith, tmp_path):
    """The incremental DAG's build, with the parameters Airflow renders (max_error_fraction 0.05 among them), given
    to shardsmith's Flex Template entry point on a local folder: an export with two broken rows passes its first
    night, the next night that adds rows, that night's retried task and a quiet night (nothing new: exit 0)."""
    import csv
    import shutil

    from pipeline.entrypoint import to_build_args

    launch = loaded["dags"]["shardsmith_incremental"]["tasks"]["build_tfrecords"]["body"]["launchParameter"]
    parameters = {k: v for k, v in launch["parameters"].items() if k != "sdk_container_image"}
    assert parameters["max_error_fraction"] == "0.05" and parameters["incremental"] == "true"
    rows = label_sorted_set.rows[::4][:65]
    for _, uri, _ in rows:
        (tmp_path / uri).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(label_sorted_set.path_of(uri), tmp_path / uri)
    (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 cut short")
    broken = [("train", "missing.jpg", rows[0][2]), ("train", "broken.jpg", rows[1][2])]
    manifest, out = tmp_path / "export.csv", tmp_path / "pets"

    def night(lines: list) -> str:
        with manifest.open("w", newline="") as f:
            csv.writer(f).writerows([("split", "image_uri", "label"), *lines])
        argv = [f"--{k}={v}" for k, v in (parameters | {"manifest": manifest, "output_dir": out}).items()]
        done = shardsmith("build", *to_build_args(argv))
        assert done.code == 0, done.err
        return done.out

    night(rows[:60] + broken)  # 2 of 62 rows failed: within 5%
    assert "added 7 (5 new records, 2 errors, 2 of them failed in" in night(rows + broken)
    for _ in ("the task retried", "a quiet night"):
        assert "nothing changed since version" in night(rows + broken)
    assert json.loads((out / "metadata.json").read_text())["num_errors"] == 2
