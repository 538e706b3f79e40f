"""What a folder without metadata.json holds when a build started there but did not finish (it failed its error
budget, or was stopped): the newest such build's errors.jsonl, explained (shardsmith/rows/failures.py).

A failed build leaves its errors.jsonl in its own folder (`builds/<build_id>/`, shardsmith/output_folder/layout.py)
and publishes nothing; `verify` and `inspect` given the top-level folder, or that build's folder, say so in one
line instead of only "no metadata.json".
"""

from __future__ import annotations

from shardsmith.format.naming import BUILDS_DIR, ERRORS_FILE, join
from shardsmith.output_folder import scan
from shardsmith.rows.failures import error_rows, explain
from shardsmith.storage import read_bytes


def _errors_file(folder: str) -> str | None:
    """errors.jsonl of the build in `folder`, or of the newest build under it that wrote one."""
    if read_bytes(join(folder, ERRORS_FILE)) is not None:
        return join(folder, ERRORS_FILE)
    try:
        builds = scan(folder).builds
    except OSError:
        return None
    for build_id in sorted(builds, reverse=True):  # build ids start with their UTC start time
        if ERRORS_FILE in builds[build_id]:
            return join(folder, BUILDS_DIR, build_id, ERRORS_FILE)
    return None


def unfinished_build(folder: str) -> str | None:
    """One line: the build in `folder` did not finish, how many rows failed and why; None if no build left an
    errors.jsonl there."""
    path = _errors_file(folder)
    if path is None:
        return None
    try:
        errors = error_rows(read_bytes(path) or b"")
    except ValueError as e:
        return f"{folder} holds no metadata.json: a build did not finish, and its {path} cannot be read ({e})"
    why = explain(errors)
    return (f"{folder} holds no metadata.json: the build did not finish (it failed its checks or was stopped); "
            f"{len(errors)} rows failed" + (f": {why}" if why else "") + f"; see {path}")
