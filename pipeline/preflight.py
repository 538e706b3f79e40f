"""Checks made on the launching machine before the job starts. They touch the inputs' names and the output
folder only: no manifest row and no image is read here.

Systemic problems (a missing manifest, an output folder that cannot be written, a folder that already holds a
dataset) fail here in one line, before any worker starts.
"""

from __future__ import annotations

import logging
import os
import stat
import uuid

from apache_beam.io.filesystems import FileSystems

from pipeline.options import BuildOptions, UsageError
from transforms.read_manifest import Source, source_kind
from transforms.records import ERRORS_FILE, LABELS_FILE, METADATA_FILE, TEMP_PREFIX, is_remote
from transforms.report import write_file_atomically
from transforms.tfds_info import TFDS_FILE_NAMES

GLOB_CHARS = "*?["
_LOG = logging.getLogger("shardsmith")
TRANSFORM_DIRS = ("transform_fn", "transformed_metadata", "transform_tmp")


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


def existing_outputs(options: BuildOptions) -> list[str]:
    """Paths in the output folder that shardsmith writes for this dataset name (and only those)."""
    out = options.output_dir
    patterns = [f"{out}/{METADATA_FILE}", f"{out}/{ERRORS_FILE}", f"{out}/{LABELS_FILE}",
                f"{out}/{options.name}-*.tfrecord-*", f"{out}/{TEMP_PREFIX}*"]
    patterns += [f"{out}/{name}" for name in TFDS_FILE_NAMES]
    patterns += [f"{out}/{d}/**" for d in TRANSFORM_DIRS]
    found = []
    for result in FileSystems.match(patterns):
        found.extend(m.path for m in result.metadata_list)
    return sorted(found)


def prepare_output_dir(options: BuildOptions) -> None:
    """Makes sure the output folder is writable and holds no earlier output, removing it with --overwrite."""
    out = options.output_dir
    try:
        if not is_remote(out):
            os.makedirs(out, exist_ok=True)
        probe = f"{out}/{TEMP_PREFIX}probe-{uuid.uuid4().hex}"
        write_file_atomically(probe, b"")
        FileSystems.delete([probe])
    except Exception as e:
        raise UsageError(f"output folder {out} is not writable: {str(e).splitlines()[0]}") from None
    found = existing_outputs(options)
    if not found:
        return
    finished = any(p.endswith("/" + METADATA_FILE) for p in found)
    if finished and not options.overwrite:
        shown = ", ".join(p.rsplit("/", 1)[-1] for p in found[:3])
        raise UsageError(f"{out} already holds a shardsmith dataset ({shown}{', ...' if len(found) > 3 else ''}); "
                         "pass --overwrite to replace it")
    if not finished:
        # No metadata.json: a build that was killed or failed its checks. Re-running the same command (as a
        # scheduler's retry does) replaces it; only files with names shardsmith writes are removed.
        _LOG.info("removing %d files of an unfinished build in %s", len(found), out)
    # metadata.json goes first: a folder without it never looks like a finished dataset.
    FileSystems.delete(sorted(found, key=lambda p: not p.endswith("/" + METADATA_FILE)))
    if not is_remote(out):
        for d in TRANSFORM_DIRS:
            _remove_empty_dirs(os.path.join(out, d))


def _remove_empty_dirs(root: str) -> None:
    if not os.path.isdir(root):
        return
    for dirpath, _, _ in sorted(os.walk(root), key=lambda t: -len(t[0])):
        if not os.listdir(dirpath):
            os.rmdir(dirpath)
