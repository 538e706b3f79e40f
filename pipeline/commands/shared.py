"""What several commands share: the `--version` and `--verbose` arguments, the kept version a command names, the
output folder's lock for the time of a command's change (a tags.json write, a card or readcheck.json written into a
version's folder), and tags.json read by a command that writes it again."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager

from shardsmith.errors import UsageError
from shardsmith.output_folder import Tag, TagsUnreadable, read_tags


def add_version_argument(parser: argparse.ArgumentParser) -> None:
    """`--version ID_OR_TAG`: the kept version a read-side command reads instead of the published one."""
    parser.add_argument("--version", default=None, metavar="ID_OR_TAG",
                        help="a kept version (its build id, or a tag's name; `shardsmith versions` lists both) "
                             "instead of the published one")


def add_verbose_argument(parser: argparse.ArgumentParser) -> None:
    """`--verbose`: TensorFlow's C++ log lines kept (pipeline/cli.py reads it before anything imports TensorFlow)."""
    parser.add_argument("--verbose", action="store_true",
                        help="keep TensorFlow's C++ log lines (the same as SHARDSMITH_VERBOSE=1)")


def kept_build_id(output_dir: str, version: str | None, split: str | None = None) -> str:
    """The build id of the kept version `version` names (None: the published one); UsageError as readers say it,
    or when it holds no split `split`."""
    from shardsmith.format.naming import BUILD_ID
    from shardsmith.output_folder import open_version

    try:
        opened = open_version(output_dir, version)
    except (FileNotFoundError, ValueError) as e:
        raise UsageError(str(e)) from None
    if split is not None and split not in opened.metadata.splits:
        raise UsageError(f"split {split!r} is not in this dataset ({', '.join(opened.metadata.splits)})")
    build_id = opened.build_id or opened.metadata.build_id
    if build_id is None or not BUILD_ID.fullmatch(build_id):
        raise UsageError(f"{output_dir} was built before builds had folders: build it again to get a dataset card")
    return build_id


@contextmanager
def folder_lock(output_dir: str, command: str = "tag") -> Iterator[None]:
    """The output folder's lock for the time of one command's change (a tags.json write, a card written into a
    version's folder); UsageError while a build holds it, saying to run `command` again."""
    from shardsmith.output_folder import lock_for_command, new_build_id

    lock = lock_for_command(output_dir, new_build_id(), then=command)
    try:
        from shardsmith.output_folder import remove_temporaries

        remove_temporaries(output_dir)  # a tags.json write killed before its rename, say
        yield
    finally:
        lock.release()


def readable_tags(output_dir: str) -> dict[str, Tag]:
    """tags.json's tags, for a command that writes it again; UsageError for one that cannot be read (never written
    over: its pins would be lost)."""
    try:
        return read_tags(output_dir)
    except TagsUnreadable as e:
        raise UsageError(f"{e}; it is left as it is (its tags would be lost): fix or remove it, then tag again") \
            from None
