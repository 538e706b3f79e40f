"""What a shard writer is told: where it writes (a build's target, so its files folder and the lock it checks come
from one value), the dataset name its files carry, and how it makes each record.

Guarantee: a writer's files folder and its lock are never passed apart. A build or a compaction writes to its
BuildTarget (shardsmith/output_folder/target.py): files into `builds/<build id>/`, the folder's lock checked for
that build id. The one other target is an UnlockedFolder, a plain folder written outside any build (a test's or a
benchmark's), which says by its type that no lock is checked.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardsmith.format.record_file import TFRECORD, RecordFileFormat
from shardsmith.output_folder import BuildTarget, LockGuard
from shardsmith.settings import RecordSettings


@dataclass(frozen=True)
class UnlockedFolder:
    """A folder shard files are written straight into outside any build (a test's, a benchmark's): no lock to
    check."""

    files_dir: str

    @property
    def lock(self) -> None:
        return None


@dataclass(frozen=True)
class WriterConfig:
    """Where a shard writer writes (its target's files folder), the dataset name its files carry, how it makes each
    record, and the target's lock, checked before each shard is started and before it is renamed into place."""

    target: BuildTarget | UnlockedFolder
    name: str
    records: RecordSettings = RecordSettings()
    # --allowed_prefixes (real paths): checked again on each file as it is opened, since the manifest's check saw
    # only the path, which a symlink swapped in since could lead elsewhere.
    allowed_prefixes: tuple[str, ...] = ()
    list_rows: bool = False  # write each shard's row list (shardsmith/format/row_list.py): every build does
    generation: int = 1  # --incremental: later generations' shard names carry their number
    file_format: RecordFileFormat = TFRECORD  # the record file written (and, rewriting, read)

    @property
    def files_dir(self) -> str:
        """The folder the shards, their index files and row lists go into (a build's own, builds/<build id>/)."""
        return self.target.files_dir

    @property
    def lock(self) -> LockGuard | None:
        """The check that the build still holds the output folder's lock (None: an UnlockedFolder)."""
        return self.target.lock
