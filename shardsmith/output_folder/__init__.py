"""The output folder and its versions: opening a version (opening) and a build's target folder (target)."""

from shardsmith.output_folder.opening import OpenedVersion, VersionNotFound, open_version
from shardsmith.output_folder.target import BuildTarget

__all__ = ["BuildTarget", "OpenedVersion", "VersionNotFound", "open_version"]
