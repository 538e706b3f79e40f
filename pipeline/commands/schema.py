"""`shardsmith schema MANIFEST`: the --feature flags for a manifest's extra columns, inferred from the column
names its format's reader gives (a CSV's header, JSON Lines keys; shardsmith/manifest/) and its first rows,
printed for the user to copy into the build command.

Inference, per column, over its non-empty values: all integers -> int; all numbers -> float; otherwise
string. A column where some value holds --list_delimiter, or with empty cells, is a list of that type (an
empty cell of a scalar feature is an error row in the build; an empty list is not). This reads the first
rows only: the build checks every value and rejects a row whose value does not fit.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from shardsmith.errors import UsageError
from shardsmith.manifest import BOX_COLUMNS, sample_columns

DEFAULT_ROWS = 1000


def register_subparser(parsers: argparse._SubParsersAction) -> None:
    """Adds `shardsmith schema` and its arguments."""
    parser = parsers.add_parser(
        "schema", help="print --feature flags for a manifest's extra columns (types inferred from its first rows)",
        description="Infers the type of each column shardsmith does not read itself and prints the --feature "
                    "flags to copy into `shardsmith build`.")
    parser.add_argument("manifest", help="a manifest file of any format --manifest reads (a CSV one with a header)")
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS, help=f"rows to look at (default {DEFAULT_ROWS})")
    parser.add_argument("--list_delimiter", default=";")
    for column, default in (("split", "split"), ("uri", "image_uri"), ("label", "label"), ("mask", "mask_uri")):
        parser.add_argument(f"--{column}_column", default=default)
    parser.set_defaults(run=run)


def _columns(path: str, limit: int) -> Iterator[dict[str, object]]:
    from shardsmith import storage

    if not storage.exists(path):
        raise UsageError(f"manifest {path} does not exist")
    try:
        yield from sample_columns(path, limit)
    except ValueError as e:
        raise UsageError(str(e)) from None


def infer_type(values: list[object], delimiter: str) -> str:
    """The --feature type that fits every one of `values` (text cells or JSON values)."""
    is_list = any(isinstance(v, list) or v is None or (isinstance(v, str) and (not v.strip() or delimiter in v))
                  for v in values)
    items: list[object] = []
    for value in values:
        if isinstance(value, list):
            items += value
        elif isinstance(value, str) and is_list:
            items += [part.strip() for part in value.split(delimiter) if part.strip()]
        elif value is not None:
            items.append(value)
    scalar = "string"
    if items and all(_parses(int, item) for item in items):
        scalar = "int"
    elif items and all(_parses(float, item) for item in items):
        scalar = "float"
    return scalar + ("_list" if is_list else "")


def _parses(kind: type, value: object) -> bool:
    """Whether `value` (a cell's text or a JSON value) reads as `kind` (int or float); booleans never do."""
    if isinstance(value, bool):
        return False
    try:
        kind(str(value).strip())
    except ValueError:
        return False
    return True


def run(args: argparse.Namespace) -> str:
    """`shardsmith schema`: prints the --feature flags."""
    reserved = {args.split_column.lower(), args.uri_column.lower(), args.label_column.lower(),
                args.mask_column.lower(), "boxes", *BOX_COLUMNS}
    rows = list(_columns(args.manifest, args.rows))
    if not rows:
        raise UsageError(f"{args.manifest} has no data rows to infer from")
    names = [name for name in dict.fromkeys(key for row in rows for key in row) if name.lower() not in reserved]
    flags = [f"--feature {name}:{infer_type([row.get(name) for row in rows], args.list_delimiter)}"
             for name in names]
    lines = [f"# {len(names)} extra column(s) in {args.manifest}, types inferred from its first {len(rows)} rows:"]
    lines.append(" ".join(flags) if flags else "# (none: only the columns shardsmith reads itself)")
    text = "\n".join(lines)
    print(text)
    return text
