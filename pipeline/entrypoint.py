"""`python -m pipeline.entrypoint ARGS` is `shardsmith build ARGS` for launchers that give each option one value:
the Dataflow Flex Template (the Dockerfile's FLEX_TEMPLATE_PYTHON_PY_FILE calls `main`) and Airflow's
BeamRunPythonPipelineOperator (py_options=["-m"], py_file="pipeline.entrypoint").

Dataflow's Python template launcher runs the entry file with every template parameter as one `--name=value`
argument, next to the pipeline options it sets itself (--runner, --project, --region, --temp_location,
--staging_location, --job_name, --template_location, ...). A parameter has exactly one value, so the template
spells shardsmith's repeatable and boolean flags differently, and this module turns them back:

  --manifest=gs://b/a.csv,gs://b/b.csv   ->  --manifest=gs://b/a.csv --manifest=gs://b/b.csv
  --path_map=OLD=NEW,OLD2=NEW2           ->  --path_map=OLD=NEW --path_map=OLD2=NEW2
  --feature=age:int,tags:string_list     ->  --feature=age:int --feature=tags:string_list
  --overwrite=true / --overwrite=false   ->  --overwrite / (nothing); --break_lock the same

Which flags are lists and which are switches is read from their declarations (pipeline/options/flags.py), so a
new repeatable or boolean build flag needs no change here.
Every other argument passes unchanged to `shardsmith build` (pipeline.cli), whose unknown flags go to Beam.
The template's parameters and their validation regexes are in pipeline/options/flex_template_metadata.json,
generated from the same declarations (pipeline/options/flex_template.py).
"""

from __future__ import annotations

import sys

from pipeline.options.flags import BOOLEAN, LIST, names_of

TRUE_VALUES = ("true", "1", "yes")
FALSE_VALUES = ("false", "0", "no", "")


def to_build_args(argv: list[str]) -> list[str]:
    """The launcher's `--name=value` arguments as `shardsmith build` arguments."""
    lists, booleans = names_of(LIST), names_of(BOOLEAN)
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
    from pipeline import cli

    return cli.main(["build", *to_build_args(list(sys.argv[1:] if argv is None else argv))])


if __name__ == "__main__":
    sys.exit(main())
