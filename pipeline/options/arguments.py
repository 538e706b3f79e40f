"""`shardsmith build`'s and `shardsmith compact`'s command lines: argparse made from the declared flags (flags.py),
their values parsed into BuildOptions or CompactOptions, and the checks that span flags. Everything argparse does
not know passes through to Beam. Guarantee: every mistake is a UsageError of one line, raised before Beam or
TensorFlow is imported.
"""

from __future__ import annotations

import argparse

from pipeline.options.build_options import BuildOptions
from pipeline.options.compact_options import CompactOptions
from pipeline.options.flags import BOOLEAN, LIST, VALUE, BuildFlag, build_flags, compact_flags, own_flag_names
from shardsmith.errors import UsageError
from shardsmith.settings import check_feature_names
from shardsmith.settings.flag import compose

__all__ = ["UsageError", "add_build_arguments", "add_compact_arguments", "build_options_from",
           "compact_options_from", "normalize_flags", "own_flag_names", "reject_unknown_flags"]


def add_build_arguments(parser: argparse.ArgumentParser) -> None:
    """Every build flag on `parser`, in --help's sections (inputs, output, checks) and order."""
    _add_arguments(parser, build_flags())


def add_compact_arguments(parser: argparse.ArgumentParser) -> None:
    """Every compact flag on `parser`; the output folder is its positional argument OUT."""
    _add_arguments(parser, compact_flags(), positional="output_dir")


def _add_arguments(parser: argparse.ArgumentParser, flags: tuple[BuildFlag, ...], positional: str = "") -> None:
    groups: dict[str | None, argparse._ActionsContainer] = {None: parser}
    for flag in flags:
        group = flag.declared.flag.group
        if group not in groups:
            groups[group] = parser.add_argument_group(group)
        settings = dict(help=flag.help, default=flag.default)
        if flag.kind == BOOLEAN:
            settings["action"] = "store_true"
        else:
            settings |= dict(action="append" if flag.kind == LIST else "store", metavar=flag.declared.flag.metavar)
            if flag.kind == VALUE:
                settings["type"] = flag.value_type
            if flag.choices:
                settings["choices"] = flag.choices
            if flag.required and flag.name != positional:
                settings["required"] = True
        if flag.name == positional:
            del settings["action"], settings["default"]
            groups[group].add_argument(flag.name, **settings)
        else:
            groups[group].add_argument(f"--{flag.name}", **settings)


def _parsed_values(args: argparse.Namespace, flags: tuple[BuildFlag, ...]) -> dict[tuple[str, ...], object]:
    """Each flag's value in `args` through its declared parse (which raises ValueError), keyed by its path."""
    values = {}
    for flag in flags:
        value = getattr(args, flag.name)
        parse = flag.declared.flag.parse
        values[flag.declared.path] = parse(value) if parse and value is not None else value
    return values


def compact_options_from(args: argparse.Namespace) -> CompactOptions:
    """CompactOptions from parsed `compact` arguments; UsageError (one line) for the first bad value."""
    try:
        return compose(CompactOptions, _parsed_values(args, compact_flags()))
    except ValueError as e:
        raise UsageError(str(e)) from None


def build_options_from(args: argparse.Namespace) -> BuildOptions:
    """BuildOptions from parsed arguments: each flag's value through its declared parse, then the checks that
    span flags. Raises UsageError (one line) for the first mistake."""
    try:
        values = _parsed_values(args, build_flags())
        # The writer signs what it writes whenever near-duplicates are looked for: `report` compares those
        # signatures, and both modes keep them in the row lists, for the next --incremental night.
        values[("records", "perceptual_hash")] = values[("checks", "near_duplicates")] != "off"
        options = compose(BuildOptions, values)
        check_feature_names(options.manifest)
    except ValueError as e:
        raise UsageError(str(e)) from None
    task, reencoding = options.manifest.task, options.records.reencoding
    if task in ("detection", "segmentation") and reencoding.active:
        raise UsageError(f"--task {task} cannot yet be combined with --max_side or --reencode: boxes and "
                         "masks would have to follow the resize and the EXIF rotation")
    return options


def normalize_flags(argv: list[str], own: frozenset[str]) -> list[str]:
    """`--num-shards 4` and `--output-dir=x` as `--num_shards 4` and `--output_dir=x`: a dashed spelling of one
    of shardsmith's own flags is that flag. Beam's flags are left as given (Beam reads its own)."""
    normalized = []
    for arg in argv:
        if arg == "--":
            return normalized + argv[len(normalized):]
        name, eq, value = arg[2:].partition("=")
        if arg.startswith("--") and "-" in name and name.replace("-", "_") in own:
            arg = f"--{name.replace('-', '_')}{eq}{value}"
        normalized.append(arg)
    return normalized


def reject_unknown_flags(argv: list[str], own: frozenset[str], beam: frozenset[str]) -> None:
    """Raises UsageError naming every flag that neither shardsmith nor Beam knows by that exact name, with the
    closest known flag: Beam would otherwise drop it without a word. An abbreviation (`--num_shard`) is unknown:
    the parsers take flags only in full (allow_abbrev=False), and so does Beam's."""
    import difflib

    unknown = []
    for arg in argv:
        if arg == "--":
            break
        if arg.startswith("--"):
            name = arg[2:].partition("=")[0]
            if name and (name in beam or name in own):
                continue
        elif arg == "-h" or not (arg.startswith("-") and arg[1:2].isalpha()):
            continue  # a value (-1 included), or -h; Beam discards single-dash flags, so they are errors too
        close = difflib.get_close_matches(arg.lstrip("-").partition("=")[0].replace("-", "_"),
                                          sorted(own | beam), n=1)
        unknown.append(arg.partition("=")[0] + (f" (did you mean --{close[0]}?)" if close else ""))
    if unknown:
        raise UsageError(f"unknown flag{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
                         "`shardsmith build --help` lists shardsmith's flags, other flags must be Apache Beam's")
