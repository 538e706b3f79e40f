"""The Flex Templates' files, generated from the `build` and `compact` flags:
`python -m pipeline.options.flex_template --write`.

  pipeline/options/flex_template_metadata.json  what `gcloud dataflow flex-template build` reads: one parameter
                                                per build flag, with the console's label and help text and
                                                validation regexes
  pipeline/options/flex_template_flags.json     which parameters are lists (joined with commas) and which are
                                                switches (true/false): what `shardsmith run-template` needs
  pipeline/options/flex_template_compact_*.json the same two for the compaction template (the same image): the
                                                required `command` parameter (only `compact` is valid; the
                                                entry point runs build without it), then one per compact flag

Each flag's declaration (pipeline/options/flags.py reads them) says whether it exists, its order, whether it is
required, its default and choices, whether it is a list or a switch, and its Template: the console's label and
help text ("{default}" is filled in) and the regex of a free-text value. Regexes of flags with choices and of
switches are generated; a list flag's regex is its item's, repeated with commas. Guarantees: generation fails on
a flag that is neither local-only (template=None) nor given a regex it needs, and tests/pipeline/cloud/test_launch.py
fails while the committed files differ from what `--write` would write.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pipeline.options.compact_options import COMMAND as COMMAND_PARAMETER
from pipeline.options.compact_options import COMMAND_TEMPLATE
from pipeline.options.flags import BOOLEAN, LIST, BuildFlag, build_flags, compact_flags
from shardsmith.settings.flag import Template, comma_list

HERE = Path(__file__).resolve().parent
METADATA_FILE = HERE / "flex_template_metadata.json"
FLAGS_FILE = HERE / "flex_template_flags.json"
COMPACT_METADATA_FILE = HERE / "flex_template_compact_metadata.json"
COMPACT_FLAGS_FILE = HERE / "flex_template_compact_flags.json"
COMMAND = "python -m pipeline.options.flex_template --write"


def template_flags(flags: tuple[BuildFlag, ...] | None = None) -> list[BuildFlag]:
    """The flags (default: the build's) that are template parameters (all but the local-only ones, declared with
    template=None): the required ones first, each group in --help's order."""
    flags = [flag for flag in (build_flags() if flags is None else flags) if flag.template is not None]
    return [flag for flag in flags if flag.required] + [flag for flag in flags if not flag.required]


def regex_of(flag: BuildFlag, row: Template) -> str:
    if flag.kind == BOOLEAN or flag.choices:
        if row.regex:
            raise ValueError(f"--{flag.name}: its regex is generated (from its choices, or true|false); drop it")
        return "^(" + "|".join(("true", "false") if flag.kind == BOOLEAN else flag.choices) + ")$"
    if not row.regex:
        raise ValueError(f"--{flag.name}: a free-text parameter needs a regex in its declaration's Template")
    return f"^{comma_list(row.regex) if flag.kind == LIST else row.regex}$"


def _parameter(name: str, row: Template, required: bool, regex: str, default: object = None) -> dict:
    return {"name": name, "label": row.label, "helpText": row.help.format(default=default),
            "isOptional": not required, "regexes": [regex], "paramType": "TEXT"}


def metadata() -> dict:
    """flex_template_metadata.json as a dict."""
    return {
        "name": "shardsmith",
        "description": "Balanced, shuffled, sharded TFRecords from an image manifest (shardsmith build on Dataflow).",
        "streaming": False,
        "parameters": [_parameter(flag.name, flag.template, flag.required, regex_of(flag, flag.template), flag.default)
                       for flag in template_flags()],
    }


def compact_metadata() -> dict:
    """flex_template_compact_metadata.json as a dict: `command` (required, only `compact`), then compact's flags."""
    command = _parameter(COMMAND_PARAMETER, COMMAND_TEMPLATE, True, f"^{COMMAND_TEMPLATE.regex}$")
    return {
        "name": "shardsmith-compact",
        "description": "Rewrites a versioned dataset's generations into one balanced set of shards, from the shards' "
                       "own records (shardsmith compact on Dataflow).",
        "streaming": False,
        "parameters": [command] + [_parameter(flag.name, flag.template, flag.required, regex_of(flag, flag.template),
                                              flag.default) for flag in template_flags(compact_flags())],
    }


def flag_kinds(flags: tuple[BuildFlag, ...] | None = None) -> dict:
    """flex_template_flags.json (or, for compact's flags, flex_template_compact_flags.json) as a dict."""
    parameters = template_flags(flags)
    command = "build" if flags is None else "compact"
    return {
        "about": f"Generated by `{COMMAND}` from the {command} flags; do not edit. `shardsmith run-template` joins a "
                 "repeated list flag with commas and turns a bare switch into true.",
        "list": [flag.name for flag in parameters if flag.kind == LIST],
        "boolean": [flag.name for flag in parameters if flag.kind == BOOLEAN],
    }


def generated() -> dict[Path, str]:
    """Each generated file and the text `--write` gives it."""
    return {path: json.dumps(content, indent=2) + "\n"
            for path, content in ((METADATA_FILE, metadata()), (FLAGS_FILE, flag_kinds()),
                                  (COMPACT_METADATA_FILE, compact_metadata()),
                                  (COMPACT_FLAGS_FILE, flag_kinds(compact_flags())))}


def main(argv: list[str]) -> int:
    if argv not in (["--write"], ["--check"]):
        print(f"usage: python -m pipeline.options.flex_template --write | --check\n\n{__doc__}", file=sys.stderr)
        return 2
    files = generated()
    stale = [path for path, text in files.items() if not path.is_file() or path.read_text() != text]
    if argv == ["--check"]:
        for path in stale:
            print(f"{path} is out of date: run `{COMMAND}`", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        path.write_text(files[path])
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
