"""Publishing a version: the last steps of a build's report (transforms/report.py) and of a compaction
(transforms/versions/compact_version.py), once every file of the version is in its build's folder; and an
--incremental night's way out when it holds nothing new (`publish_nothing`, once carry_over's `unchanged` said so).

Guarantees, in this order (`publish_version`): leftover temporary files are removed from the build's folder; the
build must still hold the output folder's lock (LockLost otherwise: a build whose lock was taken over publishes
nothing); metadata.json is published, the build's own copy first and the top-level one last
(`publish`, below), so the top-level metadata.json always names one finished version;
builds beyond --keep_builds, replaced more than --keep_days ago, that no kept version lists and no tag names are
retired (retired.json says which, when and by which build); the caller's last step runs (the dataset card); the
lock is released. A
failure before the top-level switch leaves the published version as it was.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from shardsmith import storage
from shardsmith.format.build_record import claim, entry_file, write_atomically
from shardsmith.format.metadata_schema import Metadata, metadata_bytes
from shardsmith.format.naming import BUILD_RECORD, BUILDS_DIR, METADATA_FILE, STAGED_METADATA, join
from shardsmith.output_folder.layout import build_dir, own_copy, read_build_record, remove_temporary_files
from shardsmith.output_folder.lock import release_lock
from shardsmith.output_folder.retention import Retention, retire_builds
from shardsmith.output_folder.tags import now_utc
from shardsmith.output_folder.target import BuildTarget

_LOG = logging.getLogger("shardsmith")


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


def publish(output_dir: str, build_id: str, metadata: Metadata,
            before_switch: Callable[[], None] | None = None) -> None:
    """Makes `build_id` the build readers of `output_dir` get: the top-level metadata.json (build_dir
    builds/<id>) is staged in the build's folder, then its own copy is written (build_dir "."), then the
    top-level file is replaced in one step (a rename locally; one object copy, then the staged copy removed,
    on Cloud Storage). Nothing but metadata.json itself ever appears at the top level, and a build killed before
    the switch still holds its staged copy: `finished` says it was never published. The build record says when,
    first (`published`: retention counts --keep_days from the next version's). `before_switch` runs just before
    the switch (the kill tests' fault point)."""
    folder = build_dir(output_dir, build_id)
    record_published(folder)
    top = metadata_bytes(replace(metadata, build_id=build_id, build_dir=f"{BUILDS_DIR}/{build_id}"))
    staged = join(folder, STAGED_METADATA)
    claim(staged)
    storage.write_bytes(staged, top)
    write_atomically(join(folder, METADATA_FILE), metadata_bytes(own_copy(metadata)))
    if before_switch is not None:
        before_switch()
    storage.rename([staged], [join(output_dir, METADATA_FILE)])
    # gone from the folder: the written list names no temporary file
    storage.delete([join(folder, entry_file(STAGED_METADATA))])


def record_published(folder: str) -> None:
    """Adds the time (UTC) to the build record in `folder`, replaced whole; a record that cannot be read is left
    as it is (retention then takes the build id's start time)."""
    record = read_build_record(folder)
    if record is not None:
        write_atomically(join(folder, BUILD_RECORD), replace(record, published=now_utc()).to_json())
