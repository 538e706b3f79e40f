"""The `shardsmith` command: `build` runs the pipeline, `sample` writes the demo dataset, `verify` reads a
dataset back and checks every record, `inspect` reports on one (and draws PNGs), `index` writes the index
files of a build made before builds wrote them, `versions` lists the kept versions, `tag`/`untag` pin one
against retention, `compact` rewrites a version's generations; `image`, `dataflow`,
`template` and `run-template` build and run it on Google Cloud (pipeline/cloud/, which needs neither Beam nor
TensorFlow: they are imported only by the commands that use them).

`run(argv)` follows Beam's examples: shardsmith's own flags are parsed here (dashed spellings too: `--num-shards`)
and every flag argparse does not know passes through to `PipelineOptions` if it is one of Beam's (`--runner`,
`--direct_running_mode`, `--project`, ...; pipeline/options/beam_flags.py); any other flag is a usage error. Flags
are taken only as spelled in full: an abbreviation (`--num_shard`) is an unknown flag, not the flag it begins.
Errors a user can fix print one line and exit 2; a dataset that fails its final checks exits 1 with the
check's message; anything else prints one line and how to see the traceback (SHARDSMITH_DEBUG=1).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import os
import shutil
import sys
import tempfile
import time
import traceback
from typing import TYPE_CHECKING

from pipeline.cloud import COMMANDS as CLOUD_COMMANDS
from pipeline.running.quiet_logs import VERBOSE_ENV, quiet
from shardsmith.errors import UsageError
from shardsmith.printable import shown

if TYPE_CHECKING:
    from shardsmith.format.metadata_schema import Metadata

DEBUG_ENV = "SHARDSMITH_DEBUG"
COMMANDS = ("build", "sample", "verify", "inspect", "schema", "index", "versions", "tag", "untag", "compact", "card",
            "readcheck")
# time.monotonic() when this command started: the process's start for `shardsmith ...` (interpreter start-up
# and imports are part of the wait), the call of main() when a program calls it; None outside main().
_command_started: float | None = None
_LOG = logging.getLogger("shardsmith")


class ExactFlagsParser(argparse.ArgumentParser):
    """An ArgumentParser that takes a flag only as spelled in full: argparse's prefix matching would read a
    schedule's `--num_shard 4` as `--num_shards 4`. Its subcommands' parsers are of this class too."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **{"allow_abbrev": False, **kwargs})


def _parser() -> argparse.ArgumentParser:
    parser = ExactFlagsParser(
        prog="shardsmith",
        description="Balanced, shuffled, sharded TFRecords from an image manifest, with Apache Beam.",
        epilog="the Google Cloud commands' settings: shardsmith COMMAND --help",
    )
    from pipeline.options.arguments import add_build_arguments

    commands = parser.add_subparsers(dest="command", required=True,
                                     metavar="{" + ",".join([*COMMANDS, *CLOUD_COMMANDS]) + "}")
    build = commands.add_parser(
        "build", help="build TFRecord shards from a manifest or a folder",
        description="Build TFRecord shards. Each flag may also be spelled with dashes (--num-shards). Apache "
                    "Beam's flags (--runner, --direct_running_mode, --direct_num_workers, --project, ...) pass "
                    "through to Beam; any other flag is an error.",
    )
    add_build_arguments(build)
    sample = commands.add_parser("sample", help="write a small demo dataset (no download)")
    sample.add_argument("directory")
    sample.add_argument("--per_label", type=int, default=40, help="images per label (default 40)")
    sample.add_argument("--seed", type=int, default=0)
    from pipeline import schema
    from shardsmith.read import inspect, verify

    verify_parser = commands.add_parser(
        "verify", help="read every record back and check it against metadata.json (exit 1 on any problem)",
        description="Read every record of every shard: framing checksums, Example keys, SHA-256, image decode and "
                    "shape, counts and bytes against metadata.json. The last line is the verdict.")
    inspect_parser = commands.add_parser(
        "inspect", help="report on a dataset: splits, labels, shard balance, errors; optional PNG plots",
        description="A readable report of a finished dataset; --contact_sheet, --heatmap and --shuffle_plot "
                    "also write PNG images.")
    for add_arguments, command in ((verify.add_arguments, verify_parser), (inspect.add_arguments, inspect_parser)):
        add_arguments(command)
        command.add_argument("--verbose", action="store_true",
                             help="keep TensorFlow's C++ log lines (the same as SHARDSMITH_VERBOSE=1)")
    schema.add_arguments(commands.add_parser(
        "schema", help="print --feature flags for a manifest's extra columns (types inferred from its first rows)",
        description="Infers the type of each column shardsmith does not read itself and prints the --feature "
                    "flags to copy into `shardsmith build`."))
    from shardsmith.read import reindex

    reindex.add_arguments(commands.add_parser(
        "index", help="write the index files (<shard>.idx) of a build made before builds wrote them",
        description="Reads every shard of the published build (checksums checked) and writes its index file "
                    "beside it, under the folder's lock; never changes a shard or metadata.json."))
    from shardsmith.read import versions

    versions.add_arguments(commands.add_parser(
        "versions", help="list the dataset's versions: the published build and the kept ones (--keep_builds)",
        description="One line per version, newest first: its id (a build id, for --version), when its build "
                    "started (UTC), records per split, and which one is current. --json prints a JSON list."))
    from shardsmith.read import tagging

    tagging.add_tag_arguments(commands.add_parser(
        "tag", help="pin a kept version under a name: retention never removes it until `untag`",
        description="Names the kept version ID (a build id, or another tag's name) NAME: --keep_builds never "
                    "retires it, and readers take NAME wherever they take a version id. Holds the folder's lock "
                    "while it writes tags.json."))
    tagging.add_untag_arguments(commands.add_parser(
        "untag", help="remove a tag: its version is then kept only while --keep_builds keeps it",
        description="Removes the tag NAME (the only way a tag goes); the next build or compaction retires its "
                    "version if --keep_builds no longer keeps it and no other tag pins it."))
    from pipeline import compact

    compact.add_arguments(commands.add_parser(
        "compact", help="rewrite the published version's generations into one balanced set of shards (a new "
                        "version)", description="Copies every record of the published version, placed as a full "
                        "build of its rows places them, into new shards, and publishes them as a new version. "
                        "Apache Beam's flags pass through, as for build."))
    from shardsmith.card import command as card_command

    card_command.add_arguments(commands.add_parser(
        "card", help="write a version's dataset card: one HTML page of its data, changes and mixing",
        description="Writes card.html into the version's build folder (under the folder's lock), or to --output. "
                    "Builds and compactions write one unless --no_card."))
    from shardsmith.card import read_check

    read_check.add_arguments(commands.add_parser(
        "readcheck", help="measure how fast this machine reads a version (tf.data, PyTorch, the decode limit, "
                          "--files) and say why",
        description="Reads one pass of a split with each reader, each in its own process, and prints images/s, "
                    "CPU per image and a verdict; the figures are saved beside the version and shown on its card."))
    for name, line in CLOUD_COMMANDS.items():  # listed here; `main` hands them to pipeline.cloud
        commands.add_parser(name, help=line, add_help=False)
    return parser


LOG_FORMAT = "%(asctime)s %(levelname)s %(message)s"


class ShownFormatter(logging.Formatter):
    """Log lines with the inputs' unprintable characters escaped (shardsmith/printable.py): a build logs
    labels, URIs and error details."""

    def format(self, record: logging.LogRecord) -> str:
        from shardsmith.printable import shown

        return shown(super().format(record), keep_newlines=True)


class StderrHandler(logging.StreamHandler):
    """The log's handler on stderr. A line logged after that stream was closed (by a thread still running when the
    program's caller closed it: a writer pool's job thread warning about a killed writer) is dropped: there is no
    one to read it, and logging's default would print a "--- Logging error ---" traceback on whatever stderr is
    then."""

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        if getattr(self.stream, "closed", False):
            return
        super().handleError(record)


def _configure_logging(local: bool) -> None:
    handler = StderrHandler()
    handler.setFormatter(ShownFormatter(LOG_FORMAT))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    if local and not os.environ.get(DEBUG_ENV):
        # The local runner logs every bundle at INFO and a failing DoFn's traceback at ERROR; `main` reports
        # failures in one line instead. On a remote runner Beam's INFO lines are kept: they carry the job id
        # and console URL that schedulers (Airflow's Beam operator) look for.
        for name in ("apache_beam", "tensorflow_transform", "absl", "tensorflow"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


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
    from shardsmith.core.manifest import resolve_sources

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


def build(argv: list[str]) -> Metadata | None:
    """Parses `build` arguments, runs the pipeline to completion and returns its metadata.json (None for a job
    left running)."""
    from pipeline.options import beam_flags
    from pipeline.options.arguments import build_options_from, normalize_flags, own_flag_names, reject_unknown_flags

    # Every check of the arguments comes before Beam and TensorFlow are imported (seconds): a mistake is
    # reported at once, before any folder is made.
    own = own_flag_names()
    argv = normalize_flags(argv, own)
    reject_unknown_flags(argv, own, beam_flags.names())
    parser = _parser()
    args, beam_args = parser.parse_known_args(["build", *argv])
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


def _fixed_labels(path: str | None, normalization: str = "none"):
    """--label_file FILE's list, read (local or gs://) and checked before Beam starts: a usage error of one line.
    Its labels are normalized as the rows' are (--normalize_labels)."""
    if path is None:
        return None
    from shardsmith.core.label_list import read_label_list

    return read_label_list(path, normalization)


def _run_build(options, sources, beam_args: list[str], fixed_labels=None) -> Metadata | None:
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipeline.checks.incremental import carried_labels
    from pipeline.checks.preflight import prepare_output_dir
    from pipeline.graph import build_graph
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
    _configure_logging(local)
    started = time.monotonic() if _command_started is None else _command_started
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
        from shardsmith.core.shard_worker import close_build_pool
        from shardsmith.format.build_folder import build_dir

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
    from shardsmith.core.label_list import moved_ids_line

    moved = moved_ids_line(published_labels, tuple(metadata.labels))
    if moved:
        print(shown(f"shardsmith: {moved}"), flush=True)
    return metadata


def unchanged_version(output_dir: str, build_id: str, previous: str) -> Metadata | None:
    """The published metadata.json when an --incremental run found nothing to change (its report published
    nothing and removed its build's folder, and `previous` is still published); None otherwise."""
    from shardsmith import storage
    from shardsmith.format.build_folder import build_dir
    from shardsmith.format.metadata import read_metadata
    from shardsmith.format.naming import BUILD_RECORD, join

    if storage.exists(join(build_dir(output_dir, build_id), BUILD_RECORD)):  # gone last when a build is removed
        return None
    published = read_metadata(output_dir)
    return published if published.build_id == previous else None


def finished_build(output_dir: str, build_id: str) -> Metadata:
    """The result of a run that waited until its job finished, on any runner: read back from the output folder
    (metadata.json, and errors.jsonl when it lists rows), never from the runner's process. A job that finished
    without them wrote somewhere the launcher cannot see: an error, not a silent success."""
    from shardsmith import storage
    from shardsmith.format.build_folder import build_dir
    from shardsmith.format.metadata import read_metadata
    from shardsmith.format.metadata_schema import MetadataMissing
    from shardsmith.format.naming import ERRORS_FILE, METADATA_FILE, join

    files_dir = build_dir(output_dir, build_id)
    try:
        metadata = read_metadata(files_dir)
    except MetadataMissing:
        raise RuntimeError(f"the job finished but {join(files_dir, METADATA_FILE)} does not exist: its workers "
                           "wrote somewhere this machine cannot see") from None
    if metadata.error_count and not storage.exists(join(files_dir, ERRORS_FILE)):
        raise RuntimeError(f"the job finished but {join(files_dir, ERRORS_FILE)} does not exist")
    return metadata


def sample(argv: list[str]) -> str:
    args = _parser().parse_args(["sample", *argv])
    from pipeline.sample import make_sample

    manifest = make_sample(args.directory, args.per_label, args.seed)
    print(f"shardsmith: wrote a demo dataset; its manifest is {manifest}")
    return manifest


def run(argv: list[str] | None = None) -> Metadata | str | int | None:
    """Runs a subcommand and returns its result (a cloud command's: its exit status); raises on failure (see
    `main` for the exit codes)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["build"], ["verify"], ["inspect"]) and "--verbose" in argv[1:]:
        os.environ[VERBOSE_ENV] = "1"  # before quiet(), and inherited by the writer processes
    quiet()  # TensorFlow's C++ log lines off unless --verbose or SHARDSMITH_VERBOSE=1 (pipeline/running/quiet_logs.py)
    if argv and argv[0] in CLOUD_COMMANDS:
        from pipeline.cloud.cli import main as cloud_main

        return cloud_main(argv)
    if argv and not argv[0].startswith("-") and argv[0] not in COMMANDS:
        import difflib

        close = difflib.get_close_matches(argv[0], [*COMMANDS, *CLOUD_COMMANDS], n=1)
        raise UsageError(f"unknown command {argv[0]!r}" + (f" (did you mean {close[0]}?)" if close else "")
                         + "; `shardsmith --help` lists the commands")
    if not argv or argv[0] not in COMMANDS:
        _parser().parse_args(argv)  # prints usage and exits
    command, rest = argv[0], argv[1:]
    if command in ("verify", "inspect", "schema", "index", "versions"):
        from pipeline import schema
        from shardsmith.read import inspect, reindex, verify, versions

        args = _parser().parse_args([command, *rest])
        module = {"verify": verify, "inspect": inspect, "schema": schema, "index": reindex,
                  "versions": versions}[command]
        if command not in ("verify", "index"):
            return module.run(args)
        from pipeline.running.progress import Task, task_progress

        with task_progress(Task(command, "checked" if command == "verify" else "indexed")):
            return module.run(args)
    if command in ("card", "readcheck"):
        from shardsmith.card import command as card_command
        from shardsmith.card import read_check

        args = _parser().parse_args([command, *rest])
        return card_command.run(args) if command == "card" else read_check.run(args)
    if command in ("tag", "untag"):
        from shardsmith.read import tagging

        args = _parser().parse_args([command, *rest])
        return tagging.run_tag(args) if command == "tag" else tagging.run_untag(args)
    if command == "compact":
        from pipeline.compact import check_arguments, compact, normalized, runs_locally

        args, beam_args = _parser().parse_known_args([command, *normalized(rest)])
        options = check_arguments(args, beam_args)  # before Beam is imported
        _configure_logging(runs_locally(beam_args))
        return compact(options, beam_args)
    return build(rest) if command == "build" else sample(rest)


def _one_line(error: BaseException) -> str:
    from shardsmith.core.build_lock import LOCK_LOST_MARKER
    from transforms.report import CHECK_FAILED_MARKER

    text = str(error)
    for marker in (CHECK_FAILED_MARKER, LOCK_LOST_MARKER):
        if marker not in text:
            continue
        # Runners (and the shard writer processes) wrap a step's exception in their own text;
        # keep the step's own sentence.
        text = text[text.index(marker):]
        for end in ("\n", " [while running", "\" [while running"):
            if end in text:
                text = text[: text.index(end)]
        break
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    # Beam's multi-line errors ("Pipeline has validations errors:") put the reason on the next line.
    return f"{lines[0]} {lines[1]}" if lines[0].endswith(":") and len(lines) > 1 else lines[0]


def _process_age_s() -> float:
    """Seconds since this process started (Linux's /proc/self/stat, in clock ticks since boot); 0.0 where that
    cannot be read."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rpartition(")")[2].split()  # the command name before ")" may hold spaces
        started_s = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - started_s)
    except (OSError, ValueError, IndexError, AttributeError):
        return 0.0


def main(argv: list[str] | None = None) -> int:
    """The `shardsmith` command (argv None: sys.argv) or a program's call of it; returns the exit status."""
    status = _main(argv)
    if argv is None:
        _exit_at_once(status)
    return status


def _exit_at_once(status: int) -> None:
    """Ends the `shardsmith` process once its work is done and reported: atexit handlers run (logging's flush,
    multiprocessing's joins), the interpreter's own teardown is skipped. Finalizing Beam's and TensorFlow's
    modules took 2-7 s after the summary had printed (measured on 2 cores), a wait the summary cannot count."""
    import atexit

    sys.stdout.flush()
    sys.stderr.flush()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _main(argv: list[str] | None) -> int:
    global _command_started
    _command_started = time.monotonic() - (_process_age_s() if argv is None else 0.0)
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in CLOUD_COMMANDS:  # before Beam is imported; these report their own mistakes
        from pipeline.cloud.cli import main as cloud_main

        return cloud_main(argv)
    from pipeline.running.interrupts import Interrupts
    from shardsmith.errors import UsageError

    interrupts = Interrupts()
    # What the process held before this command (a test session's, a notebook's, TensorFlow's objects) is left
    # out of the collections until the command ends: they then scan only the command's own objects. With
    # TensorFlow loaded, a demo build took 1.5-1.7 s before, 0.9-1.0 s after (build_overhead.py --with_tensorflow).
    gc.freeze()
    try:
        with interrupts:
            result = run(argv)
        return 0 if getattr(result, "ok", True) else 1  # verify: the verdict line is already printed
    except UsageError as e:
        print(shown(f"shardsmith: error: {e}", keep_newlines=True), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("shardsmith: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # the one place a traceback is turned into a sentence
        if interrupts.seen:
            print("shardsmith: interrupted", file=sys.stderr)
            return 130
        if os.environ.get(DEBUG_ENV):
            raise
        from shardsmith.errors import worker_usage_error_in

        usage = worker_usage_error_in(str(e))
        if usage is not None:
            print(shown(f"shardsmith: error: {usage}", keep_newlines=True), file=sys.stderr)
            return 2
        traceback.clear_frames(e.__traceback__)  # their locals hold the failed graph: let finally collect it
        from shardsmith.core.build_lock import LOCK_LOST_MARKER
        from transforms.report import CHECK_FAILED_MARKER

        line = _one_line(e)
        if line.startswith((CHECK_FAILED_MARKER, LOCK_LOST_MARKER)):
            print(shown(line), file=sys.stderr)
        else:
            print(f"shardsmith: the job failed: {type(e).__name__}: {shown(line[:500])}\n"
                  f"shardsmith: run again with {DEBUG_ENV}=1 to see the traceback", file=sys.stderr)
        return 1
    finally:
        # A finished graph's DoFns (tf.transform's with --feature) hold protobuf objects in reference cycles. Left
        # to the collection at interpreter exit, which runs after sys.modules is emptied, protobuf's upb
        # extension crashes freeing them (SIGSEGV in PyUpb_RepeatedContainer_Dealloc, exit status 139 instead
        # of ours); collected here, while every module is still there, they go quietly.
        gc.collect()
        gc.unfreeze()
        _command_started = None


if __name__ == "__main__":
    sys.exit(main())
