"""`shardsmith compact OUT`: rewrites the published version's generations into one balanced set of shards per
split, from the shards' own records, and publishes it as a new version (transforms/versions/compact_version.py is the
pipeline, shardsmith/versions/compaction.py the model, docs/versions.md the rule for when to run it).

On the launching machine: the output folder's lock is taken as a build takes it, the published version read
under it, unfinished builds of earlier runs removed and the compaction's build folder started; a folder without
a version of --incremental builds, or one whose version is in one generation already, is a usage error (one
line, exit 2) before anything is written. Apache Beam's flags (--runner, --direct_num_workers, ...) pass
through, as for `build`; a local run uses the same runner as a local build.
"""

from __future__ import annotations

import argparse
import logging
import time
from typing import TYPE_CHECKING

from shardsmith.errors import UsageError

if TYPE_CHECKING:
    from pipeline.options.compact_options import CompactOptions
    from shardsmith.format.metadata_schema import Metadata

_LOG = logging.getLogger("shardsmith")


def register_subparser(parsers: argparse._SubParsersAction) -> None:
    """Adds `shardsmith compact` and its flags, from their declarations (pipeline/options/compact_options.py);
    Apache Beam's flags pass through to `run`."""
    from pipeline.options.arguments import add_compact_arguments

    parser = parsers.add_parser(
        "compact", help="rewrite the published version's generations into one balanced set of shards (a new "
                        "version)", description="Copies every record of the published version, placed as a full "
                        "build of its rows places them, into new shards, and publishes them as a new version. "
                        "Apache Beam's flags pass through, as for build.")
    add_compact_arguments(parser)
    parser.set_defaults(run=run, normalize_argv=normalized, beam_flags=True)


def run(args: argparse.Namespace, beam_args: list[str]) -> Metadata | None:
    """`shardsmith compact`: the arguments checked (before Beam is imported), then the compaction."""
    from pipeline.running.command_logs import configure_logging

    options = check_arguments(args, beam_args)
    configure_logging(runs_locally(beam_args))
    return compact(options, beam_args)


def normalized(argv: list[str]) -> list[str]:
    """`--keep-builds 3` as `--keep_builds 3`: a dashed spelling of one of compact's flags is that flag."""
    from pipeline.options.arguments import normalize_flags
    from pipeline.options.flags import compact_flags

    return normalize_flags(argv, frozenset(flag.name for flag in compact_flags()))


def compact(options: CompactOptions, beam_args: list[str]) -> Metadata | None:
    """Compacts options.output_dir's published version; returns the new version's metadata.json (with
    --compact_after K and no split above K generations: the published one, unchanged; None for a job left to run,
    `leaves_job_running`, which holds the folder's lock until its publish step). `options` come from
    `check_arguments`."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipeline.running.progress import Task, task_progress
    from pipeline.running.runner import leaves_job_running, make_pipeline
    from shardsmith.format.build_record import BuildRecord
    from shardsmith.format.metadata import read_metadata
    from shardsmith.output_folder import (
        BuildTarget,
        build_dir,
        lock_for_command,
        new_build_id,
        retire_builds,
        start_build,
    )
    from shardsmith.printable import shown
    from shardsmith.read.summary import retired_text
    from shardsmith.shard_writer.shard_worker import close_build_pool
    from shardsmith.versions import compaction_source, most_generations
    from transforms.versions.compact_version import Compaction, CompactVersion

    started = time.monotonic()
    beam_options = PipelineOptions(beam_args)
    output_dir = options.output_dir
    lock = lock_for_command(output_dir, new_build_id(), break_lock=options.break_lock)
    submitted = False
    try:
        published = _published(output_dir)
        if options.compact_after is not None and published.incremental is not None:
            most = most_generations(published)
            if most <= options.compact_after:
                print(f"shardsmith: version {published.build_id} has at most {most} generation(s) per split "
                      f"(--compact_after {options.compact_after}): nothing to compact, nothing written")
                return published
        source = compaction_source(output_dir, published)
        retire_builds(output_dir)  # unfinished builds of earlier runs, as a build's start removes them
        start_build(output_dir, BuildRecord.for_build(lock.build_id, published.name))
        lock.start_heartbeat()
        compaction = Compaction(source, BuildTarget(output_dir, lock.build_id), options.retention,
                                write_card=not options.no_card)
        with task_progress(Task("compact", "copied"), published.num_examples or 0, runs_locally(beam_args)), \
                make_pipeline(beam_options) as pipeline:
            _ = pipeline | "Compact" >> CompactVersion(
                compaction, copying_processes(beam_options, published, options.writer_processes))
        submitted = leaves_job_running(beam_options)
    finally:
        close_build_pool(BuildTarget(output_dir, lock.build_id).files_dir)  # its writer processes, if it started them
        if submitted:  # the job, still to run, holds the lock: its publish step releases it
            lock.stop_heartbeat()
        else:
            lock.release()  # the publish step released it already unless the job failed or wrote nothing
    if submitted:
        print(f"shardsmith: the compaction of version {published.build_id} into version {lock.build_id} is "
              "submitted; the job publishes it and releases the folder's lock")
        return None
    metadata = read_metadata(build_dir(output_dir, lock.build_id))
    print(f"shardsmith: compacted version {source.version} ({len(source.shards)} shards in "
          f"{published.incremental.generations} generations) into version {lock.build_id}: "
          + ", ".join(f"{split} {info.num_examples:,} records in {info.num_shards} shard(s)"
                      for split, info in metadata.splits.items())
          + f", in {time.monotonic() - started:.1f} s")
    retired = retired_text(output_dir, lock.build_id)
    if retired:
        print(shown(f"shardsmith: retired {retired}"))
    return metadata


def check_arguments(args: argparse.Namespace, beam_args: list[str]) -> CompactOptions:
    """The options of parsed `compact` arguments; UsageError for a flag neither compact nor Beam knows, a value
    its declaration refuses (a count below 1), or a folder without a published dataset. Imports no Beam for a
    local folder (`run` calls it first, for a quick one-line error)."""
    from pipeline.options import beam_flags
    from pipeline.options.arguments import compact_options_from

    unknown = [arg for arg in beam_args if arg.startswith("-") and arg[2:].partition("=")[0] not in beam_flags.names()]
    if unknown:
        raise UsageError(f"compact: unknown flag {unknown[0]}; `shardsmith compact --help` lists its flags")
    options = compact_options_from(args)
    _published(options.output_dir)
    return options


def copying_processes(beam_options, published: Metadata, requested: int) -> int:
    """Shard writer processes that copy the compacted shards: `requested` (--writer_processes) in a local run in
    one process, none on other runners; by default as many as a build of the version's records would start (one
    per core, never more than its shards), none for a version a build would write in its own process
    (transforms/write_shards.py, is_small)."""
    from pipeline.running.runner import writer_processes
    from transforms.write_shards import is_small_size

    splits = published.splits.values()
    if requested >= 0:
        return writer_processes(beam_options, requested)
    if is_small_size(sum(s.num_examples for s in splits), sum(s.num_bytes or 0 for s in splits)):
        return 0
    return min(writer_processes(beam_options, -1), sum(s.num_shards or 0 for s in splits))


def runs_locally(beam_args: list[str]) -> bool:
    """Whether Beam's flags choose a local runner (as for a build)."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipeline.running.runner import is_local

    return is_local(PipelineOptions(beam_args))


def _published(output_dir: str) -> Metadata:
    """The folder's published metadata.json; UsageError (one line) for a folder without one, holding files no
    shardsmith build wrote, or whose metadata.json gives an id or file name that leads out of the folder."""
    from shardsmith.output_folder import open_version, scan

    try:
        opened = open_version(output_dir, readable=False)
        if opened.metadata.incremental is not None:  # a version compaction would read (the others are refused later)
            opened.checked_id()
    except FileNotFoundError:
        raise UsageError(f"{output_dir} holds no published dataset: nothing to compact") from None
    except ValueError as e:
        raise UsageError(str(e)) from None
    foreign = scan(output_dir).foreign
    if foreign:
        raise UsageError(f"{output_dir} holds files that no shardsmith build wrote ({', '.join(foreign[:4])}); "
                         "compaction writes only into a folder holding shardsmith's own builds")
    return opened.metadata
