"""Publishing a version: the last steps of a build's report (transforms/report.py) and of a compaction
(transforms/versions/compact_version.py), once every file of the version is in its build's folder; and an
--incremental night's way out when it holds nothing new (`publish_nothing`, once carry_over's `unchanged` said so).

Guarantees, in this order (`publish_version`): leftover temporary files are removed from the build's folder; the
build must still hold the output folder's lock (LockLost otherwise: a build whose lock was taken over publishes
nothing); metadata.json is published, the build's own copy first and the top-level one last
(shardsmith/format/build_folder.py `publish`), so the top-level metadata.json always names one finished version;
builds beyond --keep_builds, replaced more than --keep_days ago, that no kept version lists and no tag names are
retired (retired.json says which, when and by which build); the caller's last step runs (the dataset card); the
lock is released. A
failure before the top-level switch leaves the published version as it was.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from shardsmith.format.metadata_schema import Metadata
from shardsmith.output_folder.layout import publish, remove_temporary_files, retire_builds
from shardsmith.output_folder.lock import release_lock
from shardsmith.output_folder.target import BuildTarget

_LOG = logging.getLogger("shardsmith")


class Retention(Protocol):
    """How many versions to keep (the build's and compact's RetentionSettings, --keep_builds and --keep_days)."""

    keep_builds: int
    keep_days: float


def _no_fault(point: str) -> None:
    """A fault point that does nothing (the caller passes the kill tests' `fault_injection.reached`)."""


def publish_version(target: BuildTarget, metadata: Metadata, retention: Retention,
                    after_switch: Callable[[], None] | None = None,
                    before_release: Callable[[], None] | None = None,
                    fault_point: Callable[[str], None] = _no_fault) -> None:
    """Publishes the build `target` names as its output folder's version `metadata` (see the module for the order
    of steps); `after_switch` runs once the top-level metadata.json names it, before older builds are retired;
    `before_release` once they are, while the lock is still held (the dataset card, which lists the kept
    versions, is written then). `fault_point(name)` is called at "before_metadata" and "before_switch"."""
    output_dir, build_id = target.output_dir, target.build_id
    remove_temporary_files(target.files_dir)
    fault_point("before_metadata")
    target.lock.check()
    publish(output_dir, build_id, metadata, before_switch=lambda: fault_point("before_switch"))
    if after_switch is not None:
        after_switch()
    retired = retire_builds(output_dir, build_id, retention.keep_builds, retention.keep_days)
    if retired:
        _LOG.info("removed %d build(s) beyond --keep_builds %d and --keep_days %g: %s", len(retired),
                  retention.keep_builds, retention.keep_days, ", ".join(retired))
    if before_release is not None:
        before_release()
    release_lock(output_dir, build_id)


def publish_nothing(target: BuildTarget, previous: str) -> None:
    """An --incremental night whose version is `unchanged` (a retried scheduled run, or a night without news):
    publishing would only push a real version out of --keep_builds, so the build's folder goes as an unfinished
    one does, and the lock is released; LockLost when the build no longer holds it."""
    target.lock.check()
    _LOG.info("nothing changed since version %s: nothing published", previous)
    retire_builds(target.output_dir)
    release_lock(target.output_dir, target.build_id)
