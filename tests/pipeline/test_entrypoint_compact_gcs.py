"""The compaction template as Dataflow's Flex Template launcher runs it: the entry point is given the launcher's
own options, --template_location among them, so the job graph is written to Cloud Storage (here the local
gcp-storage-emulator) for Dataflow to submit, and no job runs in the launcher's process. The launcher must then
leave the folder's lock to the job, whose publish step releases it, and exit 0 without waiting for a result."""

from __future__ import annotations

import json

from pipeline import entrypoint

IMAGE = "europe-west4-docker.pkg.dev/test-project/shardsmith/shardsmith:abc123"


def launcher_options(bucket: str, job: str, job_name: str) -> list[str]:
    """What the Python Flex Template launcher adds to the template's parameters (no Dataflow API is called: the
    job graph goes to `job`)."""
    return ["--runner=DataflowRunner", "--project=test-project", "--region=europe-west4",
            f"--temp_location=gs://{bucket}/tmp", f"--staging_location=gs://{bucket}/staging",
            f"--template_location={job}", f"--sdk_container_image={IMAGE}", f"--job_name={job_name}", "--no_auth",
            # Beam would stage a `pip freeze` of this environment, which nothing reads.
            "--experiments=disable_logging_submission_environment"]


def assert_left_to_the_job(gcs_bucket, out_dir: str, job: str, job_name: str, published: bytes | None) -> None:
    """The job graph is written; the launcher published nothing; the lock and the started build folder wait for
    the job's publish step."""
    graph = json.loads(gcs_bucket.read(job))
    assert graph["name"] == job_name
    if published is not None:
        assert gcs_bucket.read(f"{out_dir}/metadata.json") == published
    lock = json.loads(gcs_bucket.read(f"{out_dir}/.shardsmith-lock"))
    assert gcs_bucket.read(f"{out_dir}/builds/{lock['build_id']}/build.json")


def test_a_template_launch_writes_the_compaction_job_and_leaves_the_lock_to_it(gcs_bucket, capsys):
    from pipeline import cli

    rows = gcs_bucket.upload_images(24, seed=3)
    bucket = gcs_bucket.name
    out_dir = f"gs://{bucket}/out"
    args = ("--output_dir", out_dir, "--name", "pets", "--incremental", "--num_shards", "train=2,validation=1,test=1")
    assert cli.main(["build", "--manifest", gcs_bucket.upload_manifest("d1.csv", rows[:18]), *args]) == 0
    assert cli.main(["build", "--manifest", gcs_bucket.upload_manifest("d2.csv", rows[1:]), *args]) == 0
    published = gcs_bucket.read(f"{out_dir}/metadata.json")
    assert json.loads(published)["incremental"]["generations"] == 2
    capsys.readouterr()

    job = f"gs://{bucket}/staging/template_launches/compact/job_object"
    code = entrypoint.main(["--command=compact", f"--output_dir={out_dir}", "--compact_after=1", "--keep_builds=3",
                            *launcher_options(bucket, job, "shardsmith-compact-20260315")])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert_left_to_the_job(gcs_bucket, out_dir, job, "shardsmith-compact-20260315", published)
    assert "is submitted; the job publishes it" in captured.out


def test_a_template_launch_writes_the_build_job_and_leaves_the_lock_to_it(gcs_bucket, capsys):
    """The build template the same way: before, the launcher waited for a job that was not there, released the
    lock the job needed and failed reading a metadata.json the job had not written."""
    rows = gcs_bucket.upload_images(12, seed=4)
    bucket = gcs_bucket.name
    out_dir = f"gs://{bucket}/built"
    job = f"gs://{bucket}/staging/template_launches/build/job_object"
    code = entrypoint.main([f"--manifest={gcs_bucket.upload_manifest('m.csv', rows)}", f"--output_dir={out_dir}",
                            "--name=pets", "--incremental=true", *launcher_options(bucket, job, "shardsmith-20260315")])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert_left_to_the_job(gcs_bucket, out_dir, job, "shardsmith-20260315", None)
    assert not list(gcs_bucket.client.list_blobs(bucket, prefix="built/metadata.json"))
