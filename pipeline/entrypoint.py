"""`python -m pipeline.entrypoint ARGS` is `shardsmith build ARGS` for launchers that give each option one value:
the Dataflow Flex Template (the Dockerfile's FLEX_TEMPLATE_PYTHON_PY_FILE calls `main`) and Airflow's
BeamRunPythonPipelineOperator (py_options=["-m"], py_file="pipeline.entrypoint"). With `--command=compact` it is
`shardsmith compact OUT ARGS`, OUT given as `--output_dir=OUT`: the compaction template's spec, made from the same
image, declares that parameter (pipeline/options/compact_options.py), and the build template's does not, so a
build launch is unchanged.

Dataflow's Python template launcher runs the entry file with every template parameter as one `--name=value`
argument, next to the pipeline options it sets itself (--runner, --project, --region, --temp_location,
--staging_location, --job_name, --template_location, ...). A parameter has exactly one value, so the template
spells shardsmith's repeatable and boolean flags differently, and this module turns them back:

  --manifest=gs://b/a.csv,gs://b/b.csv   ->  --manifest=gs://b/a.csv --manifest=gs://b/b.csv
  --path_map=OLD=NEW,OLD2=NEW2           ->  --path_map=OLD=NEW --path_map=OLD2=NEW2
  --feature=age:int,tags:string_list     ->  --feature=age:int --feature=tags:string_list
  --overwrite=true / --overwrite=false   ->  --overwrite / (nothing); --break_lock the same

Which flags are lists and which are switches is read from their declarations (pipeline/options/flags.py), so a
new repeatable or boolean flag needs no change here.
Every other argument passes unchanged to `shardsmith build` or `compact` (pipeline.cli), whose unknown flags go to
Beam. The templates' parameters and their validation regexes are in pipeline/options/flex_template_metadata.json
and flex_template_compact_metadata.json, generated from the same declarations (pipeline/options/flex_template.py).
"""

from __future__ import annotations

import sys

from pipeline.options.compact_options import COMMAND, COMMANDS
from pipeline.options.flags import BOOLEAN, LIST, BuildFlag, compact_flags, names_of

TRUE_VALUES = ("true", "1", "yes")
FALSE_VALUES = ("false", "0", "no", "")


def to_build_args(argv: list[str]) -> list[str]:
    """The launcher's `--name=value` arguments as `shardsmith build` arguments."""
    return _one_value_args(argv)


def to_compact_args(argv: list[str]) -> list[str]:
    """The launcher's `--name=value` arguments as `shardsmith compact` arguments: `--output_dir=OUT` (the last
    one given) becomes the positional OUT, first."""
    args = _one_value_args(argv, compact_flags())
    folders = [arg.partition("=")[2] for arg in args if arg.startswith("--output_dir=")]
    rest = [arg for arg in args if not arg.startswith("--output_dir=")]
    return [*folders[-1:], *rest]


def command_of(argv: list[str]) -> tuple[str, list[str]]:
    """(the command `--command=NAME` picks, default build; the other arguments). ValueError for another name."""
    commands = [arg.partition("=")[2].strip() for arg in argv if arg.startswith(f"--{COMMAND}=")]
    command = commands[-1] if commands else "build"
    if command not in COMMANDS:
        raise ValueError(f"--{COMMAND}={command}: the template's command must be one of {', '.join(COMMANDS)}")
    return command, [arg for arg in argv if not arg.startswith(f"--{COMMAND}=")]


def _one_value_args(argv: list[str], flags: tuple[BuildFlag, ...] | None = None) -> list[str]:
    """Each list parameter split at commas into one flag per item, each switch's true/false as the bare flag or
    nothing, of the command whose flags are `flags` (default: the build's)."""
    lists, booleans = names_of(LIST, flags), names_of(BOOLEAN, flags)
    args: list[str] = []
    for arg in argv:
        key, has_value, value = arg[2:].partition("=") if arg.startswith("--") else ("", "", "")
        if has_value and key in lists:
            args += [f"--{key}={item.strip()}" for item in value.split(",") if item.strip()]
        elif has_value and key in booleans:
            if value.strip().lower() in TRUE_VALUES:
                args.append(f"--{key}")
            elif value.strip().lower() not in FALSE_VALUES:
                args.append(arg)  # shardsmith reports the bad value in one line
        else:
            args.append(arg)
    return args


def main(argv: list[str] | None = None) -> int:
    """Runs the command the arguments name (`--command=compact`, else build); returns its exit status."""
    from pipeline import cli

    try:
        command, rest = command_of(list(sys.argv[1:] if argv is None else argv))
    except ValueError as e:
        print(f"shardsmith: error: {e}", file=sys.stderr)
        return 2
    if command == "compact":
        return cli.main(["compact", *to_compact_args(rest)])
    return cli.main(["build", *to_build_args(rest)])


if __name__ == "__main__":
    sys.exit(main())
