"""The output folder and its versions: the folder's layout and its builds' lifecycle, publishing a version,
retention, tags, the retired list, the lock, opening a version, and a build's target folder.

    OUTPUT_DIR/
      metadata.json              the published version: its metadata plus "build_dir"; written last, atomically
      .shardsmith-lock           held by the one build or command changing the folder (lock)
      tags.json                  named tags that pin versions against retention (tags)
      retired.json               the versions retention removed, and when (retired)
      builds/<build id>/         one folder per build, immutable once published (layout); its record and written
                                 list are the format's (shardsmith/format/build_record.py)

The modules, by concern:
- layout: the folder's names and what it holds (build ids, build folders, `scan`, a version's shard paths), and a
  build's lifecycle in it: started, its temporaries removed, removed (only the files its record lists).
- retention: which builds stay (--keep_builds, --keep_days, tags, shards a kept version lists) and the removal
  of the others (`retire_builds`).
- publishing: `publish_version`, a build's and a compaction's last steps (temporaries, the lock checked,
  metadata.json switched, retention, the lock released); `publish_nothing` for a night without news.
- lock: one build or command at a time per folder (`acquire_lock`, `lock_for_command`, `LockGuard`).
- tags, retired: tags.json and retired.json.
- opening: `open_version`, the one way every reader, command and launcher check opens the published version or
  a kept one (a build id or a tag's name).
- target: `BuildTarget`, a build's output folder and build id as the one value the stages take.

Guarantee: a build only deletes or replaces files a shardsmith build wrote: nothing at the top level but
metadata.json, the lock, tags.json and retired.json, and in a build's folder only what its record lists.
Imports shardsmith.format and shardsmith.storage only, never Beam or TensorFlow (the shard writer, the settings and
the read side import it). Outside it, code imports the names below from this package, never one of its modules.
"""

from shardsmith.output_folder.layout import (
    FolderState,
    NotOurFolder,
    build_dir,
    build_id_time,
    carry_over_scratch,
    checked_version_id,
    dataset_dir,
    finished,
    left_behind_line,
    move_transform_output,
    new_build_id,
    newest_version,
    own_copy,
    published_build_id,
    published_dir,
    read_build_record,
    remove_build,
    remove_temporaries,
    remove_temporary_files,
    scan,
    shard_file_path,
    start_build,
    transform_scratch,
)
from shardsmith.output_folder.lock import (
    LOCK_LOST_MARKER,
    LOCK_STALE_AFTER_S,
    BuildLock,
    LockGuard,
    LockHeld,
    LockLost,
    acquire_lock,
    lock_for_command,
    not_writable,
    release_lock,
)
from shardsmith.output_folder.opening import OpenedVersion, VersionNotFound, open_version
from shardsmith.output_folder.publishing import publish_nothing, publish_version
from shardsmith.output_folder.retention import DEFAULT_KEEP_BUILDS, DEFAULT_KEEP_DAYS, retire_builds
from shardsmith.output_folder.retired import Retired, read_retired, record_retired, retention_text, retired_by
from shardsmith.output_folder.tags import Tag, TagsUnreadable, now_utc, read_tags, tag_name_problem, write_tags
from shardsmith.output_folder.target import BuildTarget

__all__ = [
    "DEFAULT_KEEP_BUILDS", "DEFAULT_KEEP_DAYS", "LOCK_LOST_MARKER", "LOCK_STALE_AFTER_S", "BuildLock", "BuildTarget",
    "FolderState", "LockGuard", "LockHeld", "LockLost", "NotOurFolder", "OpenedVersion", "Retired", "Tag",
    "TagsUnreadable", "VersionNotFound", "acquire_lock", "build_dir", "build_id_time", "carry_over_scratch",
    "checked_version_id", "dataset_dir", "finished", "left_behind_line", "lock_for_command",
    "move_transform_output", "new_build_id", "newest_version", "not_writable", "now_utc", "open_version",
    "own_copy", "publish_nothing", "publish_version", "published_build_id", "published_dir", "read_build_record",
    "read_retired", "read_tags", "record_retired", "release_lock", "remove_build", "remove_temporaries",
    "remove_temporary_files", "retention_text", "retire_builds", "retired_by", "scan", "shard_file_path",
    "start_build", "tag_name_problem", "transform_scratch", "write_tags",
]
