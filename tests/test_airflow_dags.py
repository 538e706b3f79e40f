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

ROOT = Path(__file__).resolve().parent.parent
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


def _airflow_python() -> Path:
    venv = Path(os.environ.get("SHARDSMITH_AIRFLOW_VENV") or ROOT / ".venv-airflow")
    python = venv / "bin" / "python"
    if not os.access(python, os.X_OK):
        pytest.skip(f"no Airflow virtualenv at {venv} (make one with: bash launch.sh airflow-env)")
    return python


@pytest.fixture(scope="module")
def loaded(tmp_path_factory) -> dict:
    python = _airflow_python()
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
        assert set(tasks) == {"build_tfrecords", "check_metadata_json"}
        assert tasks["build_tfrecords"]["downstream"] == ["check_metadata_json"]
        assert tasks["check_metadata_json"]["upstream"] == ["build_tfrecords"]
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
