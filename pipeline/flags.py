"""The `build` flags as data, read from the argparse parser that defines them (pipeline/options.py).

Whoever needs to know which flags exist, which are required, repeatable (action="append") or switches
(action="store_true") asks here instead of keeping a list: the Flex Template files (pipeline/flex_template.py)
and the template entry point (pipeline/entrypoint.py). Guarantee: `build_flags()` lists every option of
`shardsmith build` in the parser's order, and raises for a kind of flag it cannot describe, so a new flag
cannot slip past the template unnoticed.
"""

from __future__ import annotations

import argparse
import functools
from dataclasses import dataclass

LIST = "list"  # action="append": repeatable, one value each
BOOLEAN = "boolean"  # action="store_true": a switch without a value
VALUE = "value"  # one value; the last one given wins


@dataclass(frozen=True)
class BuildFlag:
    name: str  # the flag without its dashes, e.g. "output_dir"
    kind: str  # LIST, BOOLEAN or VALUE
    required: bool
    default: object
    choices: tuple[str, ...] | None
    help: str | None


def _kind(action: argparse.Action) -> str:
    if isinstance(action, argparse._AppendAction):
        return LIST
    if isinstance(action, argparse._StoreTrueAction):
        return BOOLEAN
    if type(action) is argparse._StoreAction and action.nargs is None:
        return VALUE
    raise TypeError(f"--{action.dest}: {type(action).__name__} flags have no Flex Template spelling yet; "
                    "teach pipeline/flags.py and pipeline/entrypoint.py how to pass one")


@functools.cache
def build_flags() -> tuple[BuildFlag, ...]:
    """Every option of `shardsmith build`, in the order the parser declares them."""
    from pipeline.options import add_build_arguments

    parser = argparse.ArgumentParser(add_help=False)
    add_build_arguments(parser)
    return tuple(
        BuildFlag(action.dest, _kind(action), bool(action.required), action.default,
                  tuple(action.choices) if action.choices else None, action.help)
        for action in parser._actions
    )


def names_of(kind: str) -> frozenset[str]:
    """The build flags of one kind (LIST, BOOLEAN or VALUE)."""
    return frozenset(flag.name for flag in build_flags() if flag.kind == kind)
