"""Checks made on the launching machine before the job starts. They touch the inputs' names and the output
folder only: no manifest row and no image is read here.

Systemic problems (a missing manifest, an output folder that cannot be written, that holds files shardsmith did
not write, that another build holds, or that already holds a dataset) fail here in one line, before any worker
starts. The folder's layout and the rules for what may be removed are in shardsmith/output_folder/.
"""

from __future__ import annotations

import contextlib
import logging
import os

from pipeline.checks.incremental import carried_version
from pipeline.options.build_options import BuildOptions
from shardsmith.errors import UsageError
from shardsmith.format.build_record import BuildRecord
from shardsmith.format.metadata import read_metadata
from shardsmith.format.metadata_schema import MetadataError
from shardsmith.format.naming import BUILDS_DIR, METADATA_FILE, join
from shardsmith.format.record_file import RECORD_FILES
from shardsmith.manifest import FixedLabels, Source, input_problem
from shardsmith.output_folder import (
    BuildLock,
    FolderState,
    left_behind_line,
    lock_for_command,
    new_build_id,
    newest_version,
    not_writable,
    published_build_id,
    retire_builds,
    scan,
    start_build,
)
from shardsmith.storage import is_remote, make_folders
from shardsmith.versions import CarriedVersion

_LOG = logging.getLogger("shardsmith")


def _inside(path: str, folder: str) -> bool:
    if is_remote(path) != is_remote(folder):
        return False
    if not is_remote(path):
        path, folder = os.path.realpath(path), os.path.realpath(folder)
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _refusal(out: str, state: FolderState) -> str:
    foreign = state.foreign
    builds = join(out, BUILDS_DIR)
    if BUILDS_DIR in foreign and not is_remote(out) and os.path.islink(builds):
        return (f"{builds} is a symbolic link (to {os.readlink(builds)}), not a folder a build made: shardsmith "
                f"never writes or deletes through one; replace it with the folder it points to, or choose another "
                "--output_dir")
    earlier_layout, published = False, None
    if METADATA_FILE in foreign:
        with contextlib.suppress(MetadataError):
            published = read_metadata(out)
            earlier_layout = published.format in RECORD_FILES and not state.builds
    if earlier_layout:
        return (f"{out} holds a dataset written by an earlier shardsmith (its files at the top level, no "
                f"{BUILDS_DIR}/ folder); it is left untouched: build into a new --output_dir")
    newest = newest_version(out, state) if foreign == [METADATA_FILE] else None
    if newest is not None:
        folder = f"{BUILDS_DIR}/{newest[0]}"
        wrong = (f"names build folder {published.build_dir!r}, which is not a finished build of the folder"
                 if published is not None else "cannot be read as shardsmith's")
        return (f"{out}/{METADATA_FILE} {wrong}, and every build's folder keeps its own copy: "
                f"restore it from {folder}/{METADATA_FILE} (with \"build_dir\": \"{folder}\"), or move "
                f"{METADATA_FILE} out of the folder and run again (a rebuild keeps the label ids of version "
                f"{newest[0]})")
    shown = ", ".join(foreign[:4]) + (f" and {len(foreign) - 4} more" if len(foreign) > 4 else "")
    move = f"move {foreign[0]}" if len(foreign) == 1 else f"move these {len(foreign)} files"
    return (f"{out} holds files that no shardsmith build wrote ({shown}); shardsmith builds only into an empty "
            f"folder or one holding its own builds, and never deletes what it did not write: {move} out of the "
            "folder (or choose another --output_dir) and run again")


def check_scratch_outside(output_dir: str, temp_dir: str | None, temp_location: str | None) -> None:
    """UsageError for a scratch folder (--temp_dir, or Beam's --temp_location, where tf.transform's scratch goes)
    inside the output folder: its files would lie outside any build's folder, and every later build would
    refuse the folder."""
    for flag, folder in (("--temp_dir", temp_dir), ("--temp_location", temp_location)):
        if folder and _inside(folder, output_dir):
            raise UsageError(f"{flag} {folder} is inside the output folder {output_dir}; scratch files go outside "
                             "it: choose a folder elsewhere (or leave the flag out)")


def check_inputs(options: BuildOptions, sources: list[Source]) -> None:
    """UsageError for what an input shows is wrong before it is read (each format's input_problem, in
    shardsmith/manifest/: a binary or unreadable manifest, columns without --uri_column or --label_column or
    that look swapped, a local folder without class folders), or an input inside the output folder. Reads a
    manifest's first rows, lists a folder's names; imports neither Beam nor TensorFlow for local text manifests
    (pipeline/cli.py calls it first)."""
    out = options.output_dir
    for source in sources:
        problem = input_problem(source, options.manifest)
        if problem:
            raise UsageError(problem)
        if _inside(source.path, out):
            raise UsageError(f"the input {source.path} is inside the output folder {out}; choose an --output_dir "
                             "that holds no inputs")


def prepare_output_dir(options: BuildOptions, sources: list[Source], label_file: FixedLabels | None = None,
                       ) -> tuple[BuildLock, CarriedVersion | None, tuple[str, ...]]:
    """Checks the inputs (check_inputs) and the output folder, takes its lock and starts a new build in it;
    returns the held lock (its `build_id` names the build), with --incremental the published version the build
    adds to, read under the lock (pipeline/checks/incremental.py), and the published version's labels in id
    order (empty in a folder without one: a rebuild that numbers them otherwise says so). Nothing is written
    into a folder holding files shardsmith did not write or a version the build cannot add to, and only
    unfinished builds of earlier runs (named by their build records) are removed."""
    out = options.output_dir
    check_inputs(options, sources)
    state = scan(out)
    if state.foreign:
        raise UsageError(_refusal(out, state))
    build_id = new_build_id()
    try:
        make_folders(out, exist_ok=True)
    except OSError as e:
        raise UsageError(not_writable(out, e)) from None
    lock = lock_for_command(out, build_id, break_lock=options.break_lock)
    try:
        state = scan(out)  # again, now that no other build can change it
        if state.foreign:
            raise UsageError(_refusal(out, state))
        if state.published is not None and not (options.overwrite or options.incremental):
            raise UsageError(f"{out} already holds a shardsmith dataset (build {published_build_id(state)}); "
                             "pass --overwrite to publish a new build in its place, or --incremental to add to it")
        newest = newest_version(out, state)
        carried = carried_version(options, label_file, newest[1] if newest is not None else None)
        removed = retire_builds(out)
        if removed:
            _LOG.info("removed %d unfinished build(s) of earlier runs in %s: %s", len(removed), out,
                      ", ".join(removed))
        left = left_behind_line(scan(out) if removed else state)
        if left:
            _LOG.info("%s: %s", out, left)
        start_build(out, BuildRecord.for_build(build_id, options.name))
    except BaseException:
        lock.release()
        raise
    return lock, carried, tuple(newest[1].labels) if newest is not None else ()
