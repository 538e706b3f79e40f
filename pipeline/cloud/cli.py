"""main() of the cloud commands: `shardsmith COMMAND ARGS` and `python -m pipeline.cloud COMMAND ARGS`.

Exit status: 0 when every step ran (or was printed); 2 with one line `PROG: COMMAND: ...` for a mistake in the
arguments, the environment or the config file, or a failed check of what the steps need (commands.CHECKS: a
Docker daemon, a gcloud account), before anything runs; else the status of the step that failed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping

from pipeline.cloud import COMMANDS, UsageError
from pipeline.cloud.commands import CHECKS, STEPS, default_tag
from pipeline.cloud.config_file import read_config
from pipeline.cloud.help import help_text
from pipeline.cloud.settings import KEYS, gather, is_true, parse_command_line, resolve
from pipeline.cloud.steps import failed_check, run_steps


def main(argv: list[str], prog: str = "shardsmith", python: str | None = None, launcher: str | None = None,
         environ: Mapping[str, str] | None = None) -> int:
    """Runs `argv` = [COMMAND, ARGS...]. `python` runs the build of `dataflow` (default: this interpreter);
    `launcher` is the launch.sh that handed over: a real `dataflow` run first has it install .venv."""
    environ = os.environ if environ is None else environ
    if not argv or argv[0] not in COMMANDS:
        print(f"{prog}: expected one of {', '.join(COMMANDS)}, got {' '.join(argv[:1]) or 'nothing'}",
              file=sys.stderr)
        return 2
    command = argv[0]
    try:
        line = parse_command_line(argv[1:])
        if line.help:
            print(help_text(prog))
            return 0
        dry_run = line.dry_run or is_true(environ.get("SHARDSMITH_DRY_RUN", ""))
        config_file = line.config or environ.get("SHARDSMITH_CONFIG", "")
        config = read_config(config_file, KEYS) if config_file else {}
        settings = resolve(command, gather(line.flags, environ, config), default_tag)
        steps = STEPS[command](settings, line.passed, python or sys.executable)
    except UsageError as e:
        print(f"{prog}: {command}: {e}", file=sys.stderr)
        return 2
    problem = None if dry_run else failed_check(CHECKS.get(command, lambda _: [])(settings))
    if problem:
        print(f"{prog}: {command}: {problem}", file=sys.stderr)
        return 2
    if command == "dataflow" and launcher and not dry_run:
        installed = subprocess.run(["bash", launcher, "install"]).returncode
        if installed:
            return installed
    return run_steps(steps, prog, dry_run)
