"""The inputs a build reads, from the --manifest values: globs expanded, folders told from manifest files, each
given its reader's kind (formats.py), sorted so that source indexes never depend on listing order."""

from __future__ import annotations

import os
import stat

from shardsmith import storage
from shardsmith.errors import UsageError
from shardsmith.manifest.formats import source_kind
from shardsmith.manifest.source import Source
from shardsmith.storage.local_files import kind_of

GLOB_CHARS = "*?["  # a --manifest holding one of these is a glob


def resolve_sources(manifests: tuple[str, ...]) -> list[Source]:
    """Expands globs and tells manifests from folders. Sorted, so source indexes do not depend on the order
    the filesystem lists them in. A local manifest that is not a regular file is a UsageError: reading a FIFO
    would wait for a writer forever, and a device such as /dev/zero never ends. Beam's FileSystems is imported
    only for a glob or a remote path: a missing local manifest is reported before Beam loads (seconds)."""
    paths: list[tuple[str, bool]] = []
    for given in manifests:
        if any(c in given for c in GLOB_CHARS):
            try:
                matched = storage.match(given)
            except Exception:  # an unreadable bucket or folder: reported as matching nothing
                matched = []
            if not matched:
                raise UsageError(f"no manifest matches {given!r}")
            paths.extend((path, False) for path in matched)
        elif storage.is_folder(given):
            paths.append((given.rstrip("/"), True))
        elif storage.exists(given):
            paths.append((given, False))
        else:
            raise UsageError(f"manifest not found: {given}")
    for path, is_folder in paths:
        if is_folder or storage.is_remote(path):
            continue
        try:
            mode = os.stat(path).st_mode
        except OSError as e:
            raise UsageError(f"manifest cannot be read: {path}: {e.strerror}") from None
        if not stat.S_ISREG(mode):
            raise UsageError(f"manifest {path} is {kind_of(mode)}, not a regular file")
    unique = sorted(set(paths))
    return [Source(path, index, source_kind(path, is_folder)) for index, (path, is_folder) in enumerate(unique)]

