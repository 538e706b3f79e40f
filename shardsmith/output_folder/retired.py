"""The versions retention removed, and when: `retired.json` at the output folder's top, so that a reader asking
for one can say it is no longer kept rather than that it never existed.

    {"retired": [{"version": "<build id>", "retired": "2026-11-26T03:12:09Z", "keep_builds": 2, "keep_days": 7,
                  "by": "<the build id whose retention removed it>"}, ...]}

Guarantees: written only by retention (`retire_builds`, under the folder's lock), whole (a rename locally, one
upload on Cloud Storage), before the versions it lists are removed; it holds the last MAX_RETIRED of them,
oldest first. It is a courtesy for error messages, never a reason to keep or remove anything: a file that cannot
be read, or an entry out of shape, counts as no entry (and the next retention writes a good file).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from shardsmith import storage
from shardsmith.format.naming import BUILD_ID, RETIRED_FILE, join

MAX_RETIRED = 200
_MAX_BYTES = 1 << 20


@dataclass(frozen=True)
class Retired:
    version: str
    retired: str  # when retention removed it (UTC)
    keep_builds: int | None  # the --keep_builds of that retention
    keep_days: float | None = None  # its --keep_days (None: before the entry, or 0)
    by: str | None = None  # the build or compaction whose retention removed it


def _path(output_dir: str) -> str:
    return join(output_dir.rstrip("/"), RETIRED_FILE)


def read_retired(output_dir: str, read_bytes: Callable[[str], bytes | None] | None = None) -> dict[str, Retired]:
    """The retired versions the file lists, by id; {} when there is no file or it cannot be read. `read_bytes`
    reads a remote file (load()'s TensorFlow reader); a local one is read without following a symbolic link."""
    path = _path(output_dir)
    try:
        data = storage.read_small_file(path, _MAX_BYTES, read_bytes)
        entries = json.loads(data.decode("utf-8"))["retired"] if data else []
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError, RecursionError):
        return {}
    found = {}
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict):
            continue
        version, retired, keep = entry.get("version"), entry.get("retired"), entry.get("keep_builds")
        days, by = entry.get("keep_days"), entry.get("by")
        if (isinstance(version, str) and BUILD_ID.fullmatch(version) and isinstance(retired, str)
                and len(retired) <= 40):
            found[version] = Retired(
                version, retired, keep if isinstance(keep, int) and not isinstance(keep, bool) and keep > 0 else None,
                float(days) if isinstance(days, (int, float)) and not isinstance(days, bool) and days > 0 else None,
                by if isinstance(by, str) and BUILD_ID.fullmatch(by) else None)
    return found


def retired_by(output_dir: str, build_id: str) -> list[Retired]:
    """The versions the retention of build `build_id` (a build or a compaction) removed, oldest first."""
    return sorted((e for e in read_retired(output_dir).values() if e.by == build_id), key=lambda e: e.version)


def retention_text(entry: Retired) -> str:
    """`--keep_builds 2, --keep_days 7`: the settings of the retention that removed `entry`."""
    keep = f"--keep_builds {entry.keep_builds}" if entry.keep_builds else "--keep_builds"
    return keep + (f", --keep_days {entry.keep_days:g}" if entry.keep_days else "")


def record_retired(output_dir: str, versions: Iterable[str], when: str, keep_builds: int | None,
                   keep_days: float | None = None, by: str | None = None) -> None:
    """Adds `versions` to retired.json (the last MAX_RETIRED kept), removed by build `by`'s retention with
    `keep_builds` and `keep_days`; the caller holds the folder's lock."""
    versions = list(versions)
    if not versions:
        return
    earlier = [entry for entry in read_retired(output_dir).values() if entry.version not in versions]
    entries = sorted(earlier, key=lambda e: (e.retired, e.version)) + [
        Retired(version, when, keep_builds, keep_days or None, by) for version in sorted(versions)]
    document = {"retired": [{"version": e.version, "retired": e.retired, "keep_builds": e.keep_builds,
                             "keep_days": e.keep_days, "by": e.by} for e in entries[-MAX_RETIRED:]]}
    storage.write_atomically(_path(output_dir), (json.dumps(document, indent=2) + "\n").encode("utf-8"))
