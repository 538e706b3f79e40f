"""`shardsmith compact OUT`: rewrites the published version's generations into one balanced set of shards per
split, from the shards' own records, and publishes it as a new version (transforms/compact.py is the
pipeline, shardsmith/core/compaction.py the model, docs/versions.md the rule for when to run it).

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
from shardsmith.format.build_folder import DEFAULT_KEEP_BUILDS

if TYPE_CHECKING:
    from shardsmith.format.metadata_schema import Metadata

_LOG = logging.getLogger("shardsmith")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("output_dir", help="a folder holding a version made by `shardsmith build --incremental`")
    parser.add_argument("--keep_builds", type=int, default=DEFAULT_KEEP_BUILDS,
                        help="published versions kept, the compacted one included, with every build they list "
                             f"(default {DEFAULT_KEEP_BUILDS})")
    parser.add_argument("--compact_after", type=int, default=None, metavar="K",
                        help="compact only when a split's shards come from more than K generations; otherwise "
                             "exit 0 and write nothing (for a scheduled DAG that runs compact after every build)")
    parser.add_argument("--break_lock", action="store_true",
                        help="take over a lock whose holder stopped refreshing it (as for build)")


def compact(args: argparse.Namespace, beam_args: list[str]) -> Metadata:
    """Compacts args.output_dir's published version; returns the new version's metadata.json (with
    --compact_after K and no split above K generations: the published one, unchanged)."""
    from pipeline.options import beam_flags

    unknown = [arg for arg in beam_args if arg.startswith("-") and arg[2:].partition("=")[0] not in beam_flags.names()]
    if unknown:
        raise UsageError(f"compact: unknown flag {unknown[0]}; `shardsmith compact --help` lists its flags")
    if args.keep_builds < 1:
        raise UsageError("--keep_builds must be at least 1 (the version being published)")
    if args.compact_after is not None and args.compact_after < 1:
        raise UsageError("--compact_after must be at least 1 (a version always has one generation)")
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipeline.running.runner import make_pipeline
    from shardsmith.core.compaction_writer import CompactionWriter
    from shardsmith.core.settings import RecordSettings
    from shardsmith.core.shard_file import WriterConfig
    from shardsmith.format.build_folder import build_dir
    from shardsmith.format.metadata import read_metadata
    from transforms.compact import Compaction, CompactVersion

    started = time.monotonic()
    beam_options = PipelineOptions(beam_args)
    output_dir = args.output_dir.rstrip("/")
    locked = _locked_source(output_dir, args.break_lock, args.compact_after)
    if not isinstance(locked, tuple):
        return locked
    lock, source = locked
    try:
        lock.start_heartbeat()
        compaction = Compaction(source, lock.build_id, args.keep_builds)
        writer = WriterConfig(output_dir=compaction.files_dir, name=source.metadata.name,
                              records=RecordSettings(compression=source.metadata.compression_or_default),
                              lock=compaction.lock, list_rows=True)
        with make_pipeline(beam_options) as pipeline:
            _ = pipeline | "Compact" >> CompactVersion(compaction, CompactionWriter(
                writer, tuple(shard.path for shard in source.shards)))
    finally:
        lock.release()  # the publish step released it already unless the job failed
    metadata = read_metadata(build_dir(output_dir, lock.build_id))
    print(f"shardsmith: compacted version {source.version} ({len(source.shards)} shards in "
          f"{source.metadata.incremental.generations} generations) into version {lock.build_id}: "
          + ", ".join(f"{split} {info.num_examples:,} records in {info.num_shards} shard(s)"
                      for split, info in metadata.splits.items())
          + f", in {time.monotonic() - started:.1f} s")
    return metadata


def _locked_source(output_dir: str, break_lock: bool, compact_after: int | None):
    """(held lock, CompactionSource): the folder's lock taken and the compaction's build folder started, as
    pipeline/checks/preflight.py does for a build; UsageError (lock released, nothing written) otherwise. With
    `compact_after` and no split above that many generations: the published metadata, lock released, nothing
    written."""
    from shardsmith.core.build_lock import LockHeld, acquire_lock
    from shardsmith.core.compaction import compaction_source, most_generations
    from shardsmith.format.build_folder import (
        BuildRecord,
        new_build_id,
        retire_builds,
        scan,
        start_build,
    )
    from shardsmith.format.metadata import read_metadata
    from shardsmith.format.metadata_schema import MetadataError, MetadataMissing

    try:
        read_metadata(output_dir)
    except MetadataMissing:
        raise UsageError(f"{output_dir} holds no published dataset: nothing to compact") from None
    except MetadataError as e:
        raise UsageError(str(e)) from None
    build_id = new_build_id()
    try:
        lock = acquire_lock(output_dir, build_id, break_lock)
    except LockHeld as e:
        raise UsageError(str(e)) from None
    except OSError as e:
        raise UsageError(f"output folder {output_dir} is not writable: {str(e).splitlines()[0]}") from None
    try:
        state = scan(output_dir)
        if state.foreign:
            raise UsageError(f"{output_dir} holds files that no shardsmith build wrote ({', '.join(state.foreign[:4])})"
                             "; compaction writes only into a folder holding shardsmith's own builds")
        published = read_metadata(output_dir)
        if compact_after is not None and published.incremental is not None:
            most = most_generations(published)
            if most <= compact_after:
                lock.release()
                print(f"shardsmith: version {published.build_id} has at most {most} generation(s) per split "
                      f"(--compact_after {compact_after}): nothing to compact, nothing written")
                return published
        source = compaction_source(output_dir, published)
        retire_builds(output_dir)  # unfinished builds of earlier runs, as a build's start removes them
        start_build(output_dir, BuildRecord.for_build(build_id, source.metadata.name))
    except BaseException:
        lock.release()
        raise
    return lock, source
