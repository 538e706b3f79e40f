"""The --config file of the cloud commands: KEY=VALUE lines in shell syntax, read and never executed.

Blank lines and lines starting with # are skipped; `export ` before a line is allowed; a value in double or single
quotes is taken as it is between them; an unquoted value ends before a ` #` comment and loses trailing blanks.
KEY is a setting's key with or without its SHARDSMITH_ prefix; a later line wins over an earlier one.
Guarantee: any other line, an unknown key or an unreadable file is a UsageError naming the file and line.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from pathlib import Path

from pipeline.cloud import UsageError

_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.S)
_QUOTED = re.compile(r"\"(.*)\"\s*|'(.*)'\s*", re.S)
_COMMENT = re.compile(r"\s#")


def read_config(path: str, keys: Collection[str]) -> dict[str, str]:
    """The settings in the file at `path`: {KEY: value} for KEY in `keys`."""
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"config file not found: {path}")
    try:
        text = file.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: cannot read it as UTF-8 text: {e}") from None
    values: dict[str, str] = {}
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.lstrip()
        if not line or line.startswith("#"):
            continue
        line = line.removeprefix("export ")
        assignment = _ASSIGNMENT.fullmatch(line)
        if assignment is None:
            raise UsageError(f"{path}:{number}: expected KEY=VALUE, got: {line.rstrip()}")
        key, value = assignment.groups()
        quoted = _QUOTED.fullmatch(value)
        if quoted:
            value = quoted.group(1) if quoted.group(1) is not None else quoted.group(2)
        else:
            value = _COMMENT.split(value, maxsplit=1)[0].rstrip()
        key = key.removeprefix("SHARDSMITH_")
        if key not in keys:
            raise UsageError(f"{path}:{number}: unknown setting {key} (the settings are listed by --help)")
        values[key] = value
    return values
