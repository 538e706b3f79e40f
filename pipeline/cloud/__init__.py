"""shardsmith on Google Cloud: `shardsmith image | dataflow | template | run-template`, also reachable as
`bash launch.sh COMMAND` (which hands over to `python -m pipeline.cloud`).

  settings.py             the settings table; the command line; flag > environment variable > --config file
  config_file.py          the --config file: KEY=VALUE lines, read and never executed
  commands.py             each command as the argv lists it runs (gcloud, docker, python)
  template_parameters.py  run-template: build flags as template parameters, in gcloud's list syntax
  steps.py                runs those argv lists in order, or prints them shell-quoted (--dry-run)
  help.py                 the help text, made from the settings table
  cli.py                  main(): exit 0, 2 with one line naming the mistake, or the status of the failing step

Guarantees: this package imports only the standard library (and `pipeline` and `shardsmith.errors`, which stay
free of Beam and TensorFlow), so the commands and every dry run work without .venv; a mistake in the command
line, the environment or the config file prints one line and exits 2 before anything runs; --dry-run prints the
exact commands, one a line, runs nothing and creates nothing.
"""

from __future__ import annotations

# A mistake in the command line, the environment or the config file: reported in one line, exit 2. The one
# UsageError of every shardsmith command (shardsmith/errors.py imports only the standard library).
from shardsmith.errors import UsageError

__all__ = ["COMMANDS", "UsageError"]

# Each command and its line in the help of `shardsmith` and of these commands.
COMMANDS = {
    "image": "build the container image (Dataflow workers and Flex Template launcher) and push it",
    "dataflow": "run `shardsmith build ARGS...` on Dataflow, its workers in the container image",
    "template": "build the Flex Template spec files (on gs://) from the image: the build's, from "
                "pipeline/options/flex_template_metadata.json, and the compaction's (-compact.json)",
    "run-template": "launch a Dataflow job from the Flex Template; build flags become template parameters "
                    "(with --command compact: compact's flags, from the compaction template)",
}
