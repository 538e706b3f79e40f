"""The `build` and `compact` flags as data, read from their declarations (the fields of BuildOptions and of the
settings it holds, and of CompactOptions; shardsmith/settings/flag.py), the build's in the order `shardsmith build
--help` has always listed them.

Whoever needs to know which flags exist asks here instead of keeping a list: argparse (arguments.py), the Flex
Template files (flex_template.py) and the template entry point (pipeline/entrypoint.py). Guarantee:
`build_flags()` lists every declared flag once: the flags `--help` has always listed in that order, then any newer
ones in declaration order; `compact_flags()` lists CompactOptions' in declaration order.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from pipeline.options.build_options import BuildOptions
from pipeline.options.compact_options import CompactOptions
from shardsmith.settings.flag import Declared, Template, declared

LIST = "list"  # repeatable: one value each
BOOLEAN = "boolean"  # a switch without a value
VALUE = "value"  # one value; the last one given wins
# The order of `shardsmith build --help` and of the Flex Template's parameters before flags were declared on
# their fields; a flag not listed follows them.
HELP_ORDER = (
    "manifest", "split_column", "uri_column", "label_column", "task", "list_delimiter", "mask_column", "feature",
    "path_map", "allowed_prefixes", "split_ratios", "output_dir", "name", "seed", "num_shards", "target_shard_mb",
    "compression", "image_mode", "max_side", "reencode", "jpeg_quality", "overwrite", "keep_builds", "break_lock",
    "validate", "on_duplicate", "near_duplicates", "near_duplicate_distance", "max_error_fraction",
    "max_image_bytes", "max_pixels", "writer_processes", "temp_dir", "verbose",
)
_TYPES = {"int": int, "float": float}


@dataclass(frozen=True)
class BuildFlag:
    name: str  # the flag without its dashes, e.g. "output_dir"
    kind: str  # LIST, BOOLEAN or VALUE
    required: bool
    default: object  # as argparse holds it: the command line's spelling of the field's default
    choices: tuple[str, ...] | None
    help: str  # with the default filled in
    declared: Declared

    @property
    def template(self) -> Template | None:
        return self.declared.flag.template

    @property
    def value_type(self) -> Any:
        """What argparse turns a VALUE's text into: int, float or str, from the field's annotation."""
        return _TYPES.get(self.declared.annotation.removesuffix(" | None"), str)


def _build_flag(flag: Declared) -> BuildFlag:
    default = flag.cli_default
    kind = LIST if flag.flag.repeatable else BOOLEAN if flag.annotation == "bool" else VALUE
    return BuildFlag(flag.name, kind, flag.flag.required, default, flag.flag.choices,
                     flag.flag.help.format(default=default), flag)


@functools.cache
def build_flags() -> tuple[BuildFlag, ...]:
    """Every option of `shardsmith build`, in `--help`'s order."""
    rank = {name: position for position, name in enumerate(HELP_ORDER)}
    flags = sorted((_build_flag(flag) for flag in declared(BuildOptions)),
                   key=lambda flag: rank.get(flag.name, len(rank)))
    return tuple(flags)


@functools.cache
def compact_flags() -> tuple[BuildFlag, ...]:
    """Every option of `shardsmith compact`, in declaration order (OUT, the folder, is its positional argument)."""
    return tuple(_build_flag(flag) for flag in declared(CompactOptions))


def names_of(kind: str, flags: tuple[BuildFlag, ...] | None = None) -> frozenset[str]:
    """The flags of one kind (LIST, BOOLEAN or VALUE) among `flags` (default: the build's)."""
    return frozenset(flag.name for flag in (build_flags() if flags is None else flags) if flag.kind == kind)


def own_flag_names() -> frozenset[str]:
    """`shardsmith build`'s own flags, without their dashes."""
    return frozenset(flag.name for flag in build_flags()) | {"help"}
