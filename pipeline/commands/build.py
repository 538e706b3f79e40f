"""`shardsmith build`: the build's launcher. Its own flags are parsed by argparse (dashed spellings too:
`--num-shards`) and every flag argparse does not know passes through to `PipelineOptions` if it is one of Beam's
(`--runner`, `--direct_running_mode`, `--project`, ...; pipeline/options/beam_flags.py); any other flag is a usage
error. Then the checks that need no Beam (paths for the runner, credentials, the inputs, --label_file), the output
folder prepared under its lock, the graph (pipeline/graph.py) run to completion, and the summary printed from what
the job left in the output folder (metadata.json, errors.jsonl), never from the runner's process.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import os
import shutil
import tempfile
import time
from typing import TYPE_CHECKING

from shardsmith.printable import shown

if TYPE_CHECKING:
    from shardsmith.format.metadata_schema import Metadata

_LOG = logging.getLogger("shardsmith")


def register_subparser(parsers: argparse._SubParsersAction) -> None:
    """Adds `shardsmith build` and its flags (pipeline/options/, every flag declared once); Apache Beam's flags
    pass through to `run`, any other unknown flag is a usage error (`checked_argv`)."""
    from pipeline.options.arguments import add_build_arguments

    parser = parsers.add_parser(
        "build", help="build TFRecord shards from a manifest or a folder",
        description="Build TFRecord shards. Each flag may also be spelled with dashes (--num-shards). Apache "
                    "Beam's flags (--runner, --direct_running_mode, --direct_num_workers, --project, ...) pass "
                    "through to Beam; any other flag is an error.",
    )
    add_build_arguments(parser)
    parser.set_defaults(run=run, normalize_argv=checked_argv, beam_flags=True)


def checked_argv(argv: list[str]) -> list[str]:
    """`build`'s arguments with dashed spellings of its flags as the flags; UsageError for a flag that is neither
    its own nor Beam's. Every check of the arguments comes before Beam and TensorFlow are imported (seconds): a
    mistake is reported at once, before any folder is made."""
    from pipeline.options import beam_flags
    from pipeline.options.arguments import normalize_flags, own_flag_names, reject_unknown_flags

    own = own_flag_names()
    argv = normalize_flags(argv, own)
    reject_unknown_flags(argv, own, beam_flags.names())
    return argv


def run(args: argparse.Namespace, beam_args: list[str]) -> Metadata | None:
    """`shardsmith build` with parsed arguments: checks them and the inputs, runs the pipeline to completion and
    returns its metadata.json (None for a job left running)."""
    from pipeline.options.arguments import build_options_from

    options = build_options_from(args)
    from pipeline.running.runner_names import absolute_beam_paths, beam_flag, check_paths_for_runner

    beam_args = absolute_beam_paths(beam_args)
    check_paths_for_runner(beam_args, options.manifests, options.output_dir, options.temp_dir)
    _check_credentials(beam_args, options)
    _check_feature_on_s3(options)
    from pipeline.checks.preflight import check_scratch_outside

    check_scratch_outside(options.output_dir, options.temp_dir, beam_flag(beam_args, "temp_location"))
    sources = _checked_sources(options)
    fixed_labels = _fixed_labels(options.label_file, options.manifest.normalize_labels)

    return _run_build(options, sources, beam_args, fixed_labels)


def _temp_dir_for(given: str | None, beam_options) -> tuple[str, bool]:
    """tf.transform's scratch folder (--feature) and whether we made it (and must remove it)."""
    from apache_beam.options.pipeline_options import GoogleCloudOptions

    if given:
        return given, False
    temp_location = beam_options.view_as(GoogleCloudOptions).temp_location
    if temp_location:
        return temp_location.rstrip("/") + "/shardsmith-tft", False
    return tempfile.mkdtemp(prefix="shardsmith-tft-"), True


def _checked_sources(options):
    """The manifests and folders to read, after the checks that need no Beam: a local manifest that is missing,
    unreadable or not a file, or a CSV header without the needed columns, is a usage error in well under a
    second (Beam is imported only for a glob or a remote path)."""
    from pipeline.checks.preflight import check_inputs
    from shardsmith.manifest import resolve_sources

    sources = resolve_sources(options.manifests)
    check_inputs(options, sources)
    return sources


def _check_credentials(beam_args: list[str], options) -> None:
    """A build on Dataflow or with gs:// paths and no Google Cloud credentials, or with s3:// paths and no AWS
    credentials, is a usage error in a second, before the clients spend minutes retrying or fail with a traceback
    (pipeline/checks/credentials.py)."""
    from pipeline.checks.credentials import (
        aws_credentials_needed_for,
        aws_credentials_problem,
        credentials_needed_for,
        credentials_problem,
    )
    from shardsmith.errors import UsageError

    inputs = (*options.manifests, *((options.label_file,) if options.label_file else ()))
    needed_for = credentials_needed_for(beam_args, inputs, options.output_dir, options.temp_dir, os.environ)
    problem = credentials_problem(needed_for) if needed_for else None
    if problem:
        raise UsageError(problem)
    s3_path = aws_credentials_needed_for((*inputs, options.output_dir, options.temp_dir or ""))
    problem = aws_credentials_problem(s3_path) if s3_path else None
    if problem:
        raise UsageError(problem)


def _check_feature_on_s3(options) -> None:
    """--feature's transform_fn/ is written by tensorflow-transform through TensorFlow's file systems, which have
    no s3://: a usage error before anything starts (docs/building.md, "Amazon S3")."""
    from shardsmith.errors import UsageError
    from shardsmith.storage import is_s3

    if options.manifest.features and (is_s3(options.output_dir) or is_s3(options.temp_dir or "")):
        raise UsageError(f"--feature with {options.output_dir if is_s3(options.output_dir) else options.temp_dir}: "
                         "tensorflow-transform writes through TensorFlow's file systems, which have no s3://; "
                         "build into a local folder or gs:// and copy the dataset (aws s3 sync)")


def _progress_shown(local: bool, carried=None):
    """A local build draws its progress on stderr (pipeline/running/progress.py), a night's with the published
    records it pairs (`carried`, a CarriedVersion); a remote job's is on its page."""
    if not local:
        return contextlib.nullcontext()
    from pipeline.running.progress import Progress

    published = 0 if carried is None or carried.is_first else sum(s.entry.num_examples or 0 for s in carried.shards)
    return Progress(published_total=published)


def _fixed_labels(path: str | None, normalization: str = "none"):
    """--label_file FILE's list, read (local or gs://) and checked before Beam starts: a usage error of one line.
    Its labels are normalized as the rows' are (--normalize_labels)."""
    if path is None:
        return None
    from shardsmith.manifest import read_label_list

    return read_label_list(path, normalization)


def _run_build(options, sources, beam_args: list[str], fixed_labels=None) -> Metadata | None:
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipeline.checks.incremental import carried_labels
    from pipeline.checks.preflight import prepare_output_dir
    from pipeline.graph import build_graph
    from pipeline.running.command_clock import command_started
    from pipeline.running.command_logs import configure_logging
    from pipeline.running.gc_tuning import run_collections
    from pipeline.running.interrupts import raise_if_interrupted
    from pipeline.running.runner import (
        is_local,
        leaves_job_running,
        make_pipeline,
        runs_in_one_process,
        writer_processes,
    )

    beam_options = PipelineOptions(beam_args)
    local = is_local(beam_options)
    processes = writer_processes(beam_options, options.writer_processes)
    configure_logging(local)
    started = command_started()
    started = time.monotonic() if started is None else started
    lock, carried, published_labels = prepare_output_dir(options, sources, fixed_labels)
    fixed_labels = carried_labels(carried, fixed_labels)
    lock.start_heartbeat()
    temp_dir, made_temp = _temp_dir_for(options.temp_dir, beam_options)
    waits = not leaves_job_running(beam_options)
    try:
        raise_if_interrupted()  # a Ctrl-C during the checks above, whatever became of its KeyboardInterrupt
        with _progress_shown(local, carried), run_collections(), make_pipeline(beam_options) as pipeline:
            build_graph(pipeline, options, sources, temp_dir, lock.build_id, processes, fixed_labels, carried,
                        fan_out=not runs_in_one_process(beam_options))
        result = pipeline.result  # set by the with-block's run(); holds the run's metrics, not the graph
        del pipeline  # its graph becomes garbage now, for main()'s collection
    except BaseException:
        waits = True  # the job failed or was never submitted: nothing else will release the lock
        raise
    finally:
        from shardsmith.output_folder import build_dir
        from shardsmith.shard_writer.shard_worker import close_build_pool

        close_build_pool(build_dir(options.output_dir, lock.build_id))  # one a failed build left open
        if made_temp:
            shutil.rmtree(temp_dir, ignore_errors=True)
        if waits:
            lock.release()  # the publish step released it already unless the job failed
        else:  # a job still to run (--no_wait_until_finish, a Flex Template launch): its publish step releases it
            lock.stop_heartbeat()
    gc.collect()  # the finished graph (main() collects again after a failure): part of the time reported
    elapsed = time.monotonic() - started
    if not waits:
        return None  # submitted, still running: its result is not there yet
    if local:
        from transforms.metrics import query

        _LOG.info("metrics: %s", query(result).describe())  # what a Dataflow job page shows (docs/metrics.md)
    if carried is not None and not carried.is_first:
        unchanged = unchanged_version(options.output_dir, lock.build_id, carried.previous)
        if unchanged is not None:
            print(f"shardsmith: nothing changed since version {carried.previous} (its records and errors.jsonl "
                  f"already account for every manifest row): nothing published", flush=True)
            return unchanged
    metadata = finished_build(options.output_dir, lock.build_id)
    from shardsmith.read.summary import build_summary

    print(shown(build_summary(metadata, options.output_dir, lock.build_id, elapsed), keep_newlines=True))
    from shardsmith.manifest import moved_ids_line

    moved = moved_ids_line(published_labels, tuple(metadata.labels))
    if moved:
        print(shown(f"shardsmith: {moved}"), flush=True)
    return metadata


def unchanged_version(output_dir: str, build_id: str, previous: str) -> Metadata | None:
    """The published metadata.json when an --incremental run found nothing to change (its report published
    nothing and removed its build's folder, and `previous` is still published); None otherwise."""
    from shardsmith import storage
    from shardsmith.format.naming import BUILD_RECORD, join
    from shardsmith.output_folder import build_dir, open_version

    if storage.exists(join(build_dir(output_dir, build_id), BUILD_RECORD)):  # gone last when a build is removed
        return None
    published = open_version(output_dir, readable=False).metadata
    return published if published.build_id == previous else None


def finished_build(output_dir: str, build_id: str) -> Metadata:
    """The result of a run that waited until its job finished, on any runner: read back from the output folder
    (metadata.json, and errors.jsonl when it lists rows), never from the runner's process. A job that finished
    without them wrote somewhere the launcher cannot see: an error, not a silent success."""
    from shardsmith import storage
    from shardsmith.format.metadata import read_metadata
    from shardsmith.format.metadata_schema import MetadataMissing
    from shardsmith.format.naming import ERRORS_FILE, METADATA_FILE, join
    from shardsmith.output_folder import build_dir

    files_dir = build_dir(output_dir, build_id)
    try:
        metadata = read_metadata(files_dir)
    except MetadataMissing:
        raise RuntimeError(f"the job finished but {join(files_dir, METADATA_FILE)} does not exist: its workers "
                           "wrote somewhere this machine cannot see") from None
    if metadata.error_count and not storage.exists(join(files_dir, ERRORS_FILE)):
        raise RuntimeError(f"the job finished but {join(files_dir, ERRORS_FILE)} does not exist")
    return metadata
