"""Nightly shardsmith builds from the Flex Template: a full build into a folder named by the run's date
(`shardsmith_flex_template`), or an incremental one into one folder that keeps versions (`shardsmith_incremental`),
which also compacts the folder once a split's shards come from more than SHARDSMITH_COMPACT_AFTER generations.

`bash launch.sh image` and `bash launch.sh template` make the image and the template spec once; this DAG then
launches a Dataflow job from the spec every night (DataflowStartFlexTemplateOperator calls the
projects.locations.flexTemplates.launch API), waits until it finishes, and checks that metadata.json exists:
its presence marks a finished dataset. A retry of the same run writes into the same dated folder, and
shardsmith replaces an unfinished build there (a finished one is kept: `overwrite` is not set).

Settings come from the Airflow worker's environment, with the same names as launch.sh's: SHARDSMITH_PROJECT,
SHARDSMITH_REGION, SHARDSMITH_BUCKET, SHARDSMITH_IMAGE, SHARDSMITH_TEMPLATE_FILE, and SHARDSMITH_MANIFEST,
SHARDSMITH_OUTPUT_ROOT, SHARDSMITH_NAME for the dataset, SHARDSMITH_KEEP_BUILDS (the incremental DAG's
versions kept, default 7) and SHARDSMITH_COMPACT_AFTER (its compaction rule's K, default 7: about weekly with
nightly builds). The compaction template's spec is the build's with `-compact` before `.json` (`bash launch.sh
template` writes both). Copy this file into the DAGs folder of an Airflow with
apache-airflow-providers-google (`bash launch.sh airflow-env` makes one for tests). shardsmith itself need not
be installed there: the job runs in the image.
"""

from __future__ import annotations

import json
import os
import re
from datetime import timedelta

import pendulum
from airflow.providers.google.cloud.operators.dataflow import DataflowStartFlexTemplateOperator
from airflow.providers.google.cloud.sensors.gcs import GCSObjectExistenceSensor
from airflow.providers.standard.operators.python import ShortCircuitOperator
from airflow.sdk import DAG

PROJECT = os.environ.get("SHARDSMITH_PROJECT", "my-project")
REGION = os.environ.get("SHARDSMITH_REGION", "us-central1")
BUCKET = os.environ.get("SHARDSMITH_BUCKET", "my-bucket")
IMAGE = os.environ.get("SHARDSMITH_IMAGE", f"{REGION}-docker.pkg.dev/{PROJECT}/shardsmith/shardsmith:latest")
TEMPLATE_FILE = os.environ.get("SHARDSMITH_TEMPLATE_FILE", f"gs://{BUCKET}/shardsmith/templates/shardsmith.json")
MANIFEST = os.environ.get("SHARDSMITH_MANIFEST", f"gs://{BUCKET}/manifests/flowers.csv")
OUTPUT_ROOT = os.environ.get("SHARDSMITH_OUTPUT_ROOT", f"gs://{BUCKET}/datasets/flowers")
NAME = os.environ.get("SHARDSMITH_NAME", "flowers")

KEEP_BUILDS = os.environ.get("SHARDSMITH_KEEP_BUILDS", "7")  # the incremental DAG's versions: a week of them
COMPACT_AFTER = os.environ.get("SHARDSMITH_COMPACT_AFTER", "7")  # compact once a split has 8+ generations
COMPACT_TEMPLATE_FILE = TEMPLATE_FILE.removesuffix(".json") + "-compact.json"
OUTPUT_BUCKET, _, OUTPUT_PREFIX = OUTPUT_ROOT.removeprefix("gs://").rstrip("/").partition("/")
# A shard file's generation, as shardsmith names it (<name>-<split>.tfrecord-gN-SSSSS-of-NNNNN; no gN: the first).
GENERATION = re.compile(r"\.tfrecord-g([1-9][0-9]*)-[0-9]{5}-of-")


def compaction_due(metadata_json: str | bytes, compact_after: int) -> bool:
    """`shardsmith compact --compact_after K`'s rule, read from the published metadata.json: some split's shards
    come from more than K generations. Checked before launching, because a launch whose program decides to write
    nothing submits no job (and still costs a launcher VM)."""
    splits = json.loads(metadata_json)["splits"].values()
    return any(len({int(found.group(1)) if (found := GENERATION.search(shard["file"])) else 1
                    for shard in split["shards"]}) > compact_after for split in splits)


def _published_version_needs_compaction(bucket: str, metadata_object: str, compact_after: str) -> bool:
    from airflow.providers.google.cloud.hooks.gcs import GCSHook

    return compaction_due(GCSHook().download(bucket_name=bucket, object_name=metadata_object), int(compact_after))


def flex_template_launch(task_id: str, job_name: str, spec: str, parameters: dict, **kwargs):
    """A task that launches a Flex Template spec of the shardsmith image and waits until its job finishes."""
    return DataflowStartFlexTemplateOperator(
        task_id=task_id,
        project_id=PROJECT,
        location=REGION,
        wait_until_finished=True,  # the task ends when the job does, so downstream tasks see the dataset
        body={
            "launchParameter": {
                "jobName": job_name,  # the operator appends a unique suffix
                "containerSpecGcsPath": spec,
                # Template parameters, validated by the regexes of the spec's metadata file
                # (pipeline/options/flex_template_metadata.json, flex_template_compact_metadata.json).
                "parameters": {
                    **parameters,
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
        **kwargs,
    )


def nightly_build(dag_id: str, description: str, folder: str, job_name: str, parameters: dict,
                  compact: bool = False) -> DAG:
    """A DAG that launches the Flex Template at 03:00 UTC into `folder` (under OUTPUT_ROOT; templated) and waits
    for the folder's metadata.json; with `compact`, then compacts the folder when shardsmith's rule says so."""
    output_dir = OUTPUT_ROOT.rstrip("/") + (f"/{folder}" if folder else "")
    with DAG(
        dag_id=dag_id,
        description=description,
        schedule="0 3 * * *",
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        max_active_runs=1,
        default_args={"retries": 2, "retry_delay": timedelta(minutes=10)},
        tags=["shardsmith", "dataflow"],
    ) as dag:
        build = flex_template_launch("build_tfrecords", job_name, TEMPLATE_FILE,
                                     {"manifest": MANIFEST, "output_dir": output_dir, "name": NAME, **parameters})
        finished = GCSObjectExistenceSensor(
            task_id="check_metadata_json",
            bucket=OUTPUT_BUCKET,
            object="/".join(part for part in (OUTPUT_PREFIX, folder, "metadata.json") if part),
            timeout=600,
            poke_interval=30,
        )
        build >> finished
        if compact:
            # After the build published (or found nothing new), never beside it: one DAG run at a time holds the
            # folder. Not retried: a compaction that failed left the previous version published, and the next
            # night's check finds it still due; a rerun after one that published finds one generation and,
            # with compact_after, writes nothing, so no run publishes twice.
            due = ShortCircuitOperator(
                task_id="compaction_due",
                python_callable=_published_version_needs_compaction,
                op_kwargs={"bucket": OUTPUT_BUCKET, "metadata_object": finished.object,
                           "compact_after": COMPACT_AFTER},
            )
            compacted = flex_template_launch(
                "compact_versions", job_name.replace("shardsmith-", "shardsmith-compact-", 1), COMPACT_TEMPLATE_FILE,
                {"command": "compact", "output_dir": output_dir, "compact_after": COMPACT_AFTER,
                 "keep_builds": parameters["keep_builds"]}, retries=0)
            finished >> due >> compacted
    return dag


# One folder per scheduled day: gs://.../datasets/flowers/20260315, a full build each night.
dated = nightly_build("shardsmith_flex_template",
                      "shardsmith build on Dataflow from the Flex Template, one dated folder a day",
                      "{{ ds_nodash }}", "shardsmith-{{ ds_nodash }}", {"max_error_fraction": "0.05"})

# One folder of versions: each night reads only the manifest's new rows (docs/versions.md). A retry of a run
# that failed replaces its unfinished build; a retry or rerun of one that published finds nothing new and
# publishes nothing, so no version is pushed out of keep_builds. A manifest that lost more than
# max_removed_fraction of the published rows fails the task before anything is written. After the build, the
# folder is compacted when a split's shards come from more than COMPACT_AFTER generations (about weekly).
incremental = nightly_build("shardsmith_incremental",
                            "incremental shardsmith build on Dataflow from the Flex Template, one folder of versions",
                            "", "shardsmith-incremental-{{ ds_nodash }}",
                            {"incremental": "true", "keep_builds": KEEP_BUILDS, "max_removed_fraction": "0.1",
                             "max_error_fraction": "0.05"}, compact=True)
