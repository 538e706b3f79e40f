"""A build's target folder: the output folder a build (or a compaction) writes into, and its build id, as one
value the stages take instead of loose paths.

Guarantee: the build's files folder (`builds/<build id>/`) and the lock it checks before each write are derived
here from those two, never passed apart, so no stage can write into one build's folder while checking another's
lock.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardsmith.output_folder.layout import build_dir
from shardsmith.output_folder.lock import LockGuard


@dataclass(frozen=True)
class BuildTarget:
    """Where one build writes: `output_dir` (the top-level folder readers open) and `build_id` (its folder
    `builds/<build_id>/`, and the holder of the folder's lock while it runs)."""

    output_dir: str
    build_id: str

    @property
    def files_dir(self) -> str:
        """The build's own folder, where every file it writes goes."""
        return build_dir(self.output_dir, self.build_id)

    @property
    def lock(self) -> LockGuard:
        """The check, before each write, that this build still holds the output folder's lock."""
        return LockGuard(self.output_dir, self.build_id)
