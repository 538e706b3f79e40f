"""The `shardsmith` commands, one module each (pipeline/cli.py dispatches to them and turns their outcome into an
exit code). Each module adds its own parser with `register_subparser(parsers)` and sets that parser's defaults:

  run             the handler: `run(args)`, or `run(args, beam_args)` for a command whose unknown flags are
                  Apache Beam's (`beam_flags=True`: build, compact)
  normalize_argv  optional: the command's arguments rewritten (dashed spellings of its flags) or refused (a flag
                  neither its own nor Beam's) before argparse reads them

  build      the build's launcher: the checks, the pipeline (pipeline/graph.py) run, the summary
  sample     the demo dataset (pipeline/sample.py makes it)
  verify     every record read back and checked (shardsmith/read/dataset_checks/ holds the checks)
  inspect    a report and PNG plots (shardsmith/read/summary.py, plots.py)
  schema     --feature flags for a manifest's extra columns
  index      the index files of a build made before builds wrote them (writes, under the folder's lock)
  versions   the dataset's versions (shardsmith/read/versions.py lists them)
  tag/untag  a name that keeps a version from retention (write tags.json, under the folder's lock)
  compact    a version's generations rewritten into one set of shards, published as a new version
  card       a version's dataset card (shardsmith/card/ makes it)
  readcheck  how fast this machine reads a version (shardsmith/card/read_check.py measures it)
  shared.py  what several commands share: --version, --verbose, the kept version named, the folder's lock

Commands import the library (shardsmith/, pipeline's build parts); nothing of the library imports a command, and
no command imports another (tests/test_import_rules.py). A command module imports neither Beam nor TensorFlow at
import time: the parser is made with every command's, also for a usage error, which must stay fast.
"""
