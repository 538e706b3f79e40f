"""`python -m pipeline.cloud [--launcher PATH] [--python PYTHON] COMMAND ARGS...`: launch.sh's hand-over.

--launcher names the launch.sh that handed over (its name prefixes messages, and a real `dataflow` run first
runs its `install`); --python is the interpreter the build of `dataflow` will run in (.venv's, which a dry run
prints without creating it).
"""

import os
import sys

from pipeline.cloud.cli import main

args = sys.argv[1:]
options = {}
while args and args[0].startswith(("--launcher=", "--python=")):
    name, _, value = args.pop(0).partition("=")
    options[name[2:]] = value
launcher = options.get("launcher")
sys.exit(main(args, prog=os.path.basename(launcher) if launcher else "shardsmith", python=options.get("python"),
              launcher=launcher))
