"""Retention: which builds of an output folder stay, and the removal of the others when a version is published
(publishing.py calls `retire_builds` under the lock) or a build or compaction starts.

Guarantees: the version the top-level metadata.json names, the newest --keep_builds versions, versions a newer
one replaced less than --keep_days ago, tagged versions (tags.json; one that cannot be read keeps every build)
and builds whose folders hold shards a kept version lists are never removed; a version whose metadata.json
cannot be read keeps every build (retention never guesses). A removed build loses only the files its record
lists (layout.remove_build); published versions removed are first added to retired.json.
"""

from __future__ import annotations

import calendar
import logging
import time
from typing import Protocol

from shardsmith.format.metadata import read_metadata
from shardsmith.format.metadata_schema import MetadataError, MetadataMissing
from shardsmith.format.naming import BUILDS_DIR, METADATA_FILE
from shardsmith.output_folder.layout import (
    build_dir,
    build_id_time,
    builds_referenced,
    finished,
    published_build_id,
    read_build_record,
    remove_build,
    remove_temporaries,
    scan,
)
from shardsmith.output_folder.retired import record_retired
from shardsmith.output_folder.tags import TagsUnreadable, now_utc, read_tags

_LOG = logging.getLogger("shardsmith")

# Published builds kept by default: the new one and the one before it, so a reader that opened the previous
# build finishes its epoch. Older ones are removed when a build is published.
DEFAULT_KEEP_BUILDS = 2
# Days a version beyond --keep_builds stays after a newer one was published: a job reading it finishes its epochs
# (or tags it) meanwhile. Delta Lake's VACUUM keeps a replaced snapshot's files 7 days by default, for the same reason.
DEFAULT_KEEP_DAYS = 7.0


class Retention(Protocol):
    """How many versions to keep (the build's and compact's RetentionSettings, --keep_builds and --keep_days)."""

    keep_builds: int
    keep_days: float


def retire_builds(output_dir: str, current: str | None = None, keep: int | None = None,
                  keep_days: float | None = None) -> list[str]:
    """Removes unfinished builds other than `current`, and with `keep`, published builds beyond the newest
    `keep` (`current` counts and is never removed) that the next newer version replaced at least `keep_days`
    days ago (`published_at`). The build the top-level metadata.json names is never removed, nor a tagged version
    (tags.json; one that cannot be read keeps every build), nor a build whose folder holds shards of a kept
    version (an --incremental version lists shards of earlier generations): a file goes only when no kept
    version lists it. Published versions removed are first added to retired.json. Call
    only while holding the folder's lock: an unfinished build is then one whose run is over. Returns the ids
    removed; what a person left in their folders stays, said in one log line. A version beyond `keep` whose folder
    stays only for the shards a kept version carries from it is retired all the same: its metadata.json goes (it
    is no longer listed or opened as a version), its shards stay until no kept version lists them. What the
    top-level metadata.json lists counts as well as each kept version's own copy: an own copy edited to list
    less never makes retention remove a folder the published version reads."""
    state = scan(output_dir)
    remove_temporaries(output_dir, state)
    try:
        tagged = {tag.version for tag in read_tags(output_dir).values()}
    except TagsUnreadable as e:
        _LOG.warning("%s; no build is removed until it is fixed or removed (`shardsmith versions %s`)", e,
                     output_dir)
        return []
    published = published_build_id(state)
    kept_versions = {build_id for build_id in (current, published) if build_id is not None}
    kept, newer = 1, None
    for build_id in sorted(state.builds, reverse=True):
        if build_id not in kept_versions and finished(state, build_id):
            if keep is None or kept < keep:
                kept += 1
                kept_versions.add(build_id)
            elif keep_days and newer is not None and _days_since(published_at(output_dir, newer)) < keep_days:
                kept_versions.add(build_id)  # replaced too recently: a job may still read it
        if finished(state, build_id) or build_id in kept_versions:
            newer = build_id
    pinned = tagged & set(state.builds)
    referenced = set().union(*(_referenced_by(output_dir, build_id, build_id in pinned)
                               for build_id in kept_versions | pinned))
    if state.published is not None:  # the copy readers follow, whatever the version's own copy says
        referenced |= builds_referenced(state.published)
    removing = [build_id for build_id in sorted(state.builds, reverse=True)
                if build_id not in kept_versions | pinned | referenced]
    # Versions no longer kept whose folders stay for the shards a kept version carries: the earlier builds they
    # carry from may go, so they stop being versions (their metadata.json goes first, as in remove_build).
    shards_only = [build_id for build_id in sorted(referenced - kept_versions - pinned, reverse=True)
                   if build_id in state.builds and finished(state, build_id)]
    record_retired(output_dir, [build_id for build_id in removing if finished(state, build_id)] + shards_only,
                   now_utc(), keep, keep_days, current)
    for build_id in shards_only:
        remove_build(output_dir, build_id, state.builds[build_id], only=METADATA_FILE)
    for build_id in removing:
        left = set(state.builds[build_id]) - set(remove_build(output_dir, build_id, state.builds[build_id]))
        if left:
            _LOG.info("%s/%s/%s: %d file(s) no build record lists (e.g. %s), left in place",
                      output_dir, BUILDS_DIR, build_id, len(left), min(left))
    return removing


def published_at(output_dir: str, build_id: str) -> str:
    """When version `build_id` was published (UTC): its build record's `published`, or, for a version published
    before that entry or whose record cannot be read, its build id's start (earlier, so the version it replaced
    counts as replaced sooner by this one's build time)."""
    record = read_build_record(build_dir(output_dir, build_id))
    return (record.published if record is not None else None) or build_id_time(build_id)


def _days_since(utc: str) -> float:
    try:
        then = calendar.timegm(time.strptime(utc, "%Y-%m-%dT%H:%M:%SZ"))
    except ValueError:
        return 0.0  # not a time: counts as just now, so nothing is removed for it
    return (time.time() - then) / 86400


def _referenced_by(output_dir: str, build_id: str, tagged: bool = False) -> set[str]:
    """The earlier builds a kept version's shards lie in. A version whose own metadata.json cannot be read
    keeps every build, and so does a tagged one without it: retention never guesses."""
    try:
        return builds_referenced(read_metadata(build_dir(output_dir, build_id)))
    except MetadataMissing:
        # unfinished (no metadata.json yet): it lists no shard; a tagged version was published, so it lost it
        return set(scan(output_dir).builds) if tagged else set()
    except MetadataError:
        return set(scan(output_dir).builds)
