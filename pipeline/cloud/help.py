"""The help of the cloud commands (`shardsmith dataflow --help`, `bash launch.sh dataflow --help`), made from
the command list, the settings table and the template's list and switch parameters, so it cannot fall behind."""

from __future__ import annotations

import textwrap

from pipeline.cloud import COMMANDS
from pipeline.cloud.settings import SETTINGS
from pipeline.cloud.template_parameters import Template

_ARGS = {"dataflow": "dataflow ARGS", "run-template": "run-template ARGS"}


def _wrap(text: str, indent: str = "  ", first: str | None = None) -> str:
    return textwrap.fill(text, width=114, initial_indent=indent if first is None else first,
                         subsequent_indent=indent, break_on_hyphens=False, break_long_words=False)


def _either(names: list[str]) -> str:
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else "".join(names)


def _row(flag: str, variable: str, default: str) -> str:
    return f"  {flag:<22} {variable:<28} {default}"


def help_text(prog: str) -> str:
    commands = "\n".join(_wrap(line, indent=" " * 22, first=f"  {_ARGS.get(name, name):<19} ")
                         for name, line in COMMANDS.items())
    rows = [_row("flag", "variable / config key", "default")]
    rows += [_row(f"--{s.flags[0]} {s.metavar}".rstrip(), f"SHARDSMITH_{s.key}", s.default) for s in SETTINGS]
    rows.append(_row("--config FILE", "SHARDSMITH_CONFIG", "none"))
    rows.append(_row("--dry-run", "SHARDSMITH_DRY_RUN", "false; true prints the exact commands (gcloud, docker,"))
    rows.append(_row("", "", "python), one a line, runs nothing and creates no .venv"))
    aliases = ", ".join(f"--{alias} (--{s.flags[0]})" for s in SETTINGS for alias in s.flags[1:])
    template = Template.load()
    lists = _either([f"--{name}" for name in template.names if name in template.lists])
    switches = _either([f"--{name}" for name in template.names if name in template.switches])
    paragraphs = [
        f"usage: {prog} {{{','.join(COMMANDS)}}} [SETTINGS] [ARGS...]",
        "commands that build and run shardsmith on Google Cloud:\n" + commands,
        _wrap("settings: the flag, else the environment variable, else the line KEY=VALUE in the --config file "
              "(shell-style: # comments, blank lines, optional `export` and quotes; read, never executed). Flags "
              "take `--flag VALUE` or `--flag=VALUE`.", indent="", first=""),
        "\n".join(rows) + "\n" + _wrap(f"Also accepted, Beam's names among them: {aliases}.") + "\n"
        + _wrap("A missing required setting exits 2 with one line naming it; so does any other mistake in the "
                "arguments, the environment or the config file, before anything runs."),
        _wrap("every other argument goes to `shardsmith build`: --manifest gs://..., --output_dir gs://..., --name, "
              "... and Beam flags. The command waits until the job finishes (what Airflow and other schedulers "
              "need) and logs the job id and console URL as soon as the job is created; add "
              "--no_wait_until_finish to return once it is submitted. The launching machine lists the manifests "
              "and checks the output folder; it reads no row and no image: Dataflow's workers do.",
              first="  dataflow ARGS: ", indent="    "),
        _wrap("the template parameters as build flags (--manifest, --output_dir, --name, ...; see "
              "pipeline/options/flex_template_metadata.json). "
              f"A repeated {lists} is joined with commas, and {switches} without a value becomes true. Workers run "
              "in --image. The command returns once the job is launched.",
              first="  run-template ARGS: ", indent="    "),
    ]
    return "\n\n".join(paragraphs)
