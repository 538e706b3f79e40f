"""Nightly shardsmith build from the Flex Template, into a folder named by the run's date.

`bash launch.sh image` and `bash launch.sh template` make the image and the template spec once; this DAG then
launches a Dataflow job from the spec every night (DataflowStartFlexTemplateOperator calls the
projects.locations.flexTemplates.launch API), waits until it finishes, and checks that metadata.json exists:
its presence marks a finished dataset. A retry of the same run writes into the same dated folder, and
shardsmith replaces an unfinished build there (a finished one is kept: `overwrite` is not set).

Settings come from the Airflow worker's environment, with the same names as launch.sh's: SHARDSMITH_PROJECT,
SHARDSMITH_REGION, SHARDSMITH_BUCKET, SHARDSMITH_IMAGE, SHARDSMITH_TEMPLATE_FILE, and SHARDSMITH_MANIFEST,
SHARDSMITH_OUTPUT_ROOT, SHARDSMITH_NAME for the dataset. Copy this file into the DAGs folder of an Airflow with
apache-airflow-providers-google (`bash launch.sh airflow-env` makes one for tests). shardsmith itself need not
be installed there: the job runs in the image.
"""

from __future__ import annotations

import os
from datetime import timedelta

import pendulum
from airflow.providers.google.cloud.operators.dataflow import DataflowStartFlexTemplateOperator
from airflow.providers.google.cloud.sensors.gcs import GCSObjectExistenceSensor
from airflow.sdk import DAG

PROJECT = os.environ.get("SHARDSMITH_PROJECT", "my-project")
REGION = os.environ.get("SHARDSMITH_REGION", "us-central1")
BUCKET = os.environ.get("SHARDSMITH_BUCKET", "my-bucket")
IMAGE = os.environ.get("SHARDSMITH_IMAGE", f"{REGION}-docker.pkg.dev/{PROJECT}/shardsmith/shardsmith:latest")
TEMPLATE_FILE = os.environ.get("SHARDSMITH_TEMPLATE_FILE", f"gs://{BUCKET}/shardsmith/templates/shardsmith.json")
MANIFEST = os.environ.get("SHARDSMITH_MANIFEST", f"gs://{BUCKET}/manifests/flowers.csv")
OUTPUT_ROOT = os.environ.get("SHARDSMITH_OUTPUT_ROOT", f"gs://{BUCKET}/datasets/flowers")
NAME = os.environ.get("SHARDSMITH_NAME", "flowers")

# One folder per scheduled day: gs://.../datasets/flowers/20260315
OUTPUT_DIR = OUTPUT_ROOT.rstrip("/") + "/{{ ds_nodash }}"
OUTPUT_BUCKET, _, OUTPUT_PREFIX = OUTPUT_ROOT.removeprefix("gs://").rstrip("/").partition("/")

with DAG(
    dag_id="shardsmith_flex_template",
    description="shardsmith build on Dataflow from the Flex Template, one dated folder a day",
    schedule="0 3 * * *",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=10)},
    tags=["shardsmith", "dataflow"],
) as dag:
    build = DataflowStartFlexTemplateOperator(
        task_id="build_tfrecords",
        project_id=PROJECT,
        location=REGION,
        wait_until_finished=True,  # the task ends when the job does, so downstream tasks see the dataset
        body={
            "launchParameter": {
                "jobName": "shardsmith-{{ ds_nodash }}",  # the operator appends a unique suffix
                "containerSpecGcsPath": TEMPLATE_FILE,
                # Template parameters, validated by the regexes of pipeline/options/flex_template_metadata.json.
                "parameters": {
                    "manifest": MANIFEST,
                    "output_dir": OUTPUT_DIR,
                    "name": NAME,
                    "max_error_fraction": "0.05",
                    # A Beam pipeline option, passed on by the launcher: workers run in the same image.
                    "sdk_container_image": IMAGE,
                },
                "environment": {
                    "tempLocation": f"gs://{BUCKET}/shardsmith/temp",
                    "stagingLocation": f"gs://{BUCKET}/shardsmith/staging",
                    "machineType": "n2-standard-4",
                    "maxWorkers": 20,
                    "additionalUserLabels": {"app": "shardsmith", "dataset": NAME.lower()},
                },
            }
        },
    )
    finished = GCSObjectExistenceSensor(
        task_id="check_metadata_json",
        bucket=OUTPUT_BUCKET,
        object=(OUTPUT_PREFIX + "/" if OUTPUT_PREFIX else "") + "{{ ds_nodash }}/metadata.json",
        timeout=600,
        poke_interval=30,
    )
    build >> finished
