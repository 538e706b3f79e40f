"""Checks made on the launching machine before the job starts. They touch the inputs' names and the output
folder only: no manifest row and no image is read here.

Systemic problems (a missing manifest, an output folder that cannot be written, that holds files shardsmith did
not write, that another build holds, or that already holds a dataset) fail here in one line, before any worker
starts. The folder's layout and the rules for what may be removed are in transforms/build_folder.py.
"""

from __future__ import annotations

import json
import logging
import os
import stat

from apache_beam.io.filesystems import FileSystems

from pipeline.options import BuildOptions, UsageError
from transforms.build_folder import (
    BUILDS_DIR,
    BuildRecord,
    new_build_id,
    published_build_id,
    read_bytes,
    retire_builds,
    scan,
    start_build,
)
from transforms.build_lock import BuildLock, LockHeld, acquire_lock
from transforms.read_manifest import Source, source_kind
from transforms.records import METADATA_FILE, is_remote

GLOB_CHARS = "*?["
_LOG = logging.getLogger("shardsmith")


def _is_folder(path: str) -> bool:
    if not is_remote(path):
        return os.path.isdir(path)
    if path.endswith("/"):
        return True
    try:
        FileSystems.get_filesystem(path).metadata(path)
        return False
    except Exception:
        return bool(FileSystems.match([path.rstrip("/") + "/**"], limits=[1])[0].metadata_list)


def resolve_sources(manifests: tuple[str, ...]) -> list[Source]:
    """Expands globs and tells manifests from folders. Sorted, so source indexes do not depend on the order
    the filesystem lists them in. A local manifest that is not a regular file is a UsageError: reading a FIFO
    would wait for a writer forever, and a device such as /dev/zero never ends."""
    paths: list[tuple[str, bool]] = []
    for given in manifests:
        if any(c in given for c in GLOB_CHARS):
            try:
                matched = FileSystems.match([given])[0].metadata_list
            except Exception:
                matched = []
            if not matched:
                raise UsageError(f"no manifest matches {given!r}")
            paths.extend((m.path, False) for m in matched)
        elif _is_folder(given):
            paths.append((given.rstrip("/"), True))
        elif FileSystems.exists(given):
            paths.append((given, False))
        else:
            raise UsageError(f"manifest not found: {given}")
    for path, is_folder in paths:
        if is_folder or is_remote(path):
            continue
        try:
            mode = os.stat(path).st_mode
        except OSError as e:
            raise UsageError(f"manifest cannot be read: {path}: {e.strerror}") from None
        if not stat.S_ISREG(mode):
            kind = ("a named pipe (FIFO)" if stat.S_ISFIFO(mode)
                    else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a special file")
            raise UsageError(f"manifest {path} is {kind}, not a regular file")
    unique = sorted(set(paths))
    return [Source(path, index, source_kind(path, is_folder)) for index, (path, is_folder) in enumerate(unique)]


def _inside(path: str, folder: str) -> bool:
    if is_remote(path) != is_remote(folder):
        return False
    if not is_remote(path):
        path, folder = os.path.realpath(path), os.path.realpath(folder)
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _refusal(out: str, foreign: list[str]) -> str:
    old = read_bytes(f"{out}/{METADATA_FILE}") if METADATA_FILE in foreign else None
    try:
        earlier_layout = old is not None and json.loads(old.decode("utf-8")).get("format") == "tfrecord"
    except (ValueError, UnicodeDecodeError, AttributeError):
        earlier_layout = False
    if earlier_layout:
        return (f"{out} holds a dataset written by an earlier shardsmith (its files at the top level, no "
                f"{BUILDS_DIR}/ folder); it is left untouched: build into a new --output_dir")
    shown = ", ".join(foreign[:4]) + (f" and {len(foreign) - 4} more" if len(foreign) > 4 else "")
    return (f"{out} holds files that no shardsmith build wrote ({shown}); shardsmith builds only into an empty "
            "folder or one holding its own builds, and never deletes what it did not write: choose another "
            "--output_dir")


def prepare_output_dir(options: BuildOptions, sources: list[Source]) -> BuildLock:
    """Checks the output folder, takes its lock and starts a new build in it; returns the held lock (its
    `build_id` names the build). Nothing is written into a folder holding files shardsmith did not write, and
    only unfinished builds of earlier runs (named by their build records) are removed."""
    out = options.output_dir
    for source in sources:
        if _inside(source.path, out):
            raise UsageError(f"the input {source.path} is inside the output folder {out}; choose an --output_dir "
                             "that holds no inputs")
    state = scan(out)
    if state.foreign:
        raise UsageError(_refusal(out, state.foreign))
    build_id = new_build_id()
    try:
        if not is_remote(out):
            os.makedirs(out, exist_ok=True)
        lock = acquire_lock(out, build_id, options.break_lock)
    except LockHeld as e:
        raise UsageError(str(e)) from None
    except OSError as e:
        raise UsageError(f"output folder {out} is not writable: {str(e).splitlines()[0]}") from None
    try:
        state = scan(out)  # again, now that no other build can change it
        if state.foreign:
            raise UsageError(_refusal(out, state.foreign))
        if state.published is not None and not options.overwrite:
            raise UsageError(f"{out} already holds a shardsmith dataset (build {published_build_id(state)}); "
                             "pass --overwrite to publish a new build in its place")
        removed = retire_builds(out)
        if removed:
            _LOG.info("removed %d unfinished build(s) of earlier runs in %s: %s", len(removed), out,
                      ", ".join(removed))
        start_build(out, BuildRecord.for_build(build_id, options.name))
    except BaseException:
        lock.release()
        raise
    return lock
