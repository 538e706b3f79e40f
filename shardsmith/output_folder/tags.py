"""Named tags that pin versions: `tags.json` at the output folder's top, written by `shardsmith tag` and
`shardsmith untag` only (pipeline/commands/tag.py, untag.py), read by retention and by every reader given a version.

    {"tags": {"NAME": {"version": "<build id>", "tagged": "2026-11-26T03:12:09Z"}, ...}}

Guarantees:
- A tag's name is TAG_NAME (a letter, then letters, digits, ".", "_", "-"; at most 64 characters), so it is
  never a build id; its version is a build id. A tag is never a path: a reader turns its version into
  `builds/<id>/` like any id.
- The file is input: anything a person could have put there is read as such. One that is not shardsmith's
  (not JSON, another shape, a name or id out of pattern, a symbolic link, over MAX_TAGS_BYTES) raises
  TagsUnreadable as a whole: no entry of it is trusted, and retention then removes no build
  (retention.py `retire_builds`).
- Written whole (shardsmith.storage.write_atomically: a rename locally, one upload on Cloud Storage), by a
  command that holds the folder's lock, so no tag is lost to a build's retention running at the same time.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from shardsmith import storage
from shardsmith.format.naming import BUILD_ID, TAG_NAME, TAGS_FILE, join

MAX_TAGS_BYTES = 1 << 20  # a thousand tags take about 100 kB


class TagsUnreadable(ValueError):
    """tags.json is there but is not a tags file shardsmith wrote; the message says why, in one line."""


@dataclass(frozen=True)
class Tag:
    name: str
    version: str  # a build id
    tagged: str  # when it was set (UTC)


def tags_path(output_dir: str) -> str:
    return join(output_dir.rstrip("/"), TAGS_FILE)


def tag_name_problem(name: str) -> str | None:
    """Why `name` cannot be a tag's name (one clause), or None when it can."""
    if BUILD_ID.fullmatch(name):
        return f"{name!r} is a build id; a tag's name must not look like one"
    if not TAG_NAME.fullmatch(name):
        return (f"{name!r} is not a tag name: a letter, then up to 63 letters, digits, '.', '_' or '-' "
                "(like release-1)")
    return None


def parse_tags(data: bytes, path: str) -> dict[str, Tag]:
    """The tags of tags.json's bytes, by name; TagsUnreadable (naming `path`) for anything else."""
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise TagsUnreadable(f"{path} is not JSON") from None
    entries = document.get("tags") if isinstance(document, dict) else None
    if not isinstance(entries, dict):
        raise TagsUnreadable(f"{path} holds no \"tags\" object")
    tags = {}
    for name, entry in entries.items():
        if tag_name_problem(name):
            raise TagsUnreadable(f"{path} holds tag {name[:80]!r}, which is not a tag name")
        version = entry.get("version") if isinstance(entry, dict) else None
        tagged = entry.get("tagged", "") if isinstance(entry, dict) else None
        if not isinstance(version, str) or not BUILD_ID.fullmatch(version):
            raise TagsUnreadable(f"{path}: tag {name} names no build id as its version")
        if not isinstance(tagged, str) or len(tagged) > 40:
            raise TagsUnreadable(f"{path}: tag {name} has no time it was set")
        tags[name] = Tag(name, version, tagged)
    return tags


def read_tags(output_dir: str, read_bytes: Callable[[str], bytes | None] | None = None) -> dict[str, Tag]:
    """The folder's tags by name ({} without tags.json); TagsUnreadable when the file cannot be trusted.
    `read_bytes` reads a remote file (load()'s TensorFlow reader); a local one is always read without following
    a symbolic link."""
    path = tags_path(output_dir)
    try:
        data = storage.read_small_file(path, MAX_TAGS_BYTES, read_bytes)
    except (OSError, ValueError) as e:
        raise TagsUnreadable(str(e).splitlines()[0] if str(e) else f"{path} cannot be read") from None
    return {} if data is None else parse_tags(data, path)


def tags_bytes(tags: dict[str, Tag]) -> bytes:
    """tags.json's content: the tags sorted by name."""
    entries = {name: {"version": tag.version, "tagged": tag.tagged} for name, tag in sorted(tags.items())}
    return (json.dumps({"tags": entries}, indent=2) + "\n").encode("utf-8")


def write_tags(output_dir: str, tags: dict[str, Tag], before_rename: Callable[[], None] | None = None) -> None:
    """Replaces tags.json whole (the caller holds the folder's lock)."""
    def chunks():
        yield tags_bytes(tags)
        if before_rename is not None:  # every byte is in the temporary file; the rename has not happened
            before_rename()

    storage.write_atomically_from(tags_path(output_dir), chunks())


def now_utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
