"""run-template's arguments: build flags (or, with `--command compact`, compact's) become Flex Template parameters,
in gcloud's `--parameters` syntax.

The template's parameters, and which are required, are those of pipeline/options/flex_template_metadata.json
(flex_template_compact_metadata.json); which are lists and which are switches is in flex_template_flags.json
(flex_template_compact_flags.json). All are generated from the flags' declarations (`python -m
pipeline.options.flex_template --write`), so this module needs no Beam to know them.
Guarantees: only the template's parameters pass, each once, in the order first given; a repeated list flag is
joined with commas (the entry point splits it again), a repeated other flag keeps its last value, a switch without
a value is `true`; the `--parameters` flag reads back as exactly these items, whatever commas they contain.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pipeline.cloud import UsageError

OPTIONS = Path(__file__).resolve().parent.parent / "options"
METADATA_FILE = OPTIONS / "flex_template_metadata.json"
FLAGS_FILE = OPTIONS / "flex_template_flags.json"
COMPACT_METADATA_FILE = OPTIONS / "flex_template_compact_metadata.json"
COMPACT_FLAGS_FILE = OPTIONS / "flex_template_compact_flags.json"
# gcloud splits a list flag at commas unless it starts with ^D^, D the delimiter used instead (gcloud topic escaping)
DELIMITERS = ("~", ";", "#", "|", "@")


@dataclass(frozen=True)
class Template:
    names: tuple[str, ...]
    required: tuple[str, ...]
    lists: frozenset[str]
    switches: frozenset[str]

    @classmethod
    def load(cls, compact: bool = False) -> Template:
        """The parameters of the template (the build's, or the compaction's) built from this checkout's files."""
        metadata_file, flags_file = (COMPACT_METADATA_FILE, COMPACT_FLAGS_FILE) if compact else (METADATA_FILE,
                                                                                                FLAGS_FILE)
        try:
            parameters = json.loads(metadata_file.read_text())["parameters"]
            kinds = json.loads(flags_file.read_text())
        except FileNotFoundError as e:
            raise UsageError(f"{e.filename} is missing: the cloud commands run from a shardsmith checkout") from None
        return cls(tuple(p["name"] for p in parameters), tuple(p["name"] for p in parameters if not p["isOptional"]),
                   frozenset(kinds["list"]), frozenset(kinds["boolean"]))


def is_compaction(args: list[str]) -> bool:
    """Whether run-template's arguments name the compaction template (`--command compact`, `--command=compact`)."""
    pairs = zip(args, args[1:], strict=False)
    return "--command=compact" in args or any(a == "--command" and b == "compact" for a, b in pairs)


def template_parameters(args: list[str], template: Template) -> list[str]:
    """Build flags (`--name VALUE`, `--name=VALUE`, a bare switch) as `name=value` items."""
    values: dict[str, str] = {}  # in order of first appearance
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if not arg.startswith("--") or arg == "--":
            raise UsageError(f"unexpected argument: {arg} (template parameters are --name VALUE)")
        name, has_value, value = arg[2:].partition("=")
        if name not in template.names:
            raise UsageError(f"--{name} is not a parameter of the template (see pipeline/options/{METADATA_FILE.name})")
        if not has_value:
            if name in template.switches:
                value = "true"
            elif i == len(args):
                raise UsageError(f"--{name} needs a value")
            else:
                value = args[i]
                i += 1
        if name in values and name in template.lists:
            value = f"{values[name]},{value}"
        values[name] = value
    for name in template.required:
        if name not in values:
            raise UsageError(f"missing --{name} (a required template parameter)")
    return [f"{name}={value}" for name, value in values.items()]


def parameters_flag(items: list[str]) -> str:
    """gcloud's `--parameters=` flag for `name=value` items: comma-separated, or ^D^-delimited when a value
    holds a comma."""
    if not any("," in item for item in items):
        return "--parameters=" + ",".join(items)
    for delimiter in DELIMITERS:
        if not any(delimiter in item for item in items):
            return f"--parameters=^{delimiter}^" + delimiter.join(items)
    raise UsageError("parameter values use every delimiter gcloud could split on: " + " ".join(DELIMITERS))
