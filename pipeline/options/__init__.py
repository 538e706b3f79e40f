"""`shardsmith build`'s and `shardsmith compact`'s flags. Each is declared once, on the settings field it fills
(shardsmith/settings/__init__.py for the stages' settings, build_options.py for the launcher's own, compact_options.py
for compact's; shardsmith/settings/flag.py says how); every module here derives what it needs from those declarations.

  build_options.py     BuildOptions: the settings each stage takes whole, the launcher's own flags, and
                       `recorded()`, the options metadata.json records
  compact_options.py   CompactOptions: `shardsmith compact`'s flags (the ones it shares, the build's own
                       declarations), and the template entry point's `command` parameter
  flags.py             the declared flags as data, in --help's order: name, kind (value, list, switch), default
  arguments.py         argparse from the flags; parsed values into BuildOptions; unknown-flag and dashed-spelling
                       handling; every mistake a one-line UsageError
  check.py             `check_build_arguments`: the whole command line checked as a real run would, without Beam
  beam_flags.py        the names of Apache Beam's own flags (beam_flag_names.py, generated), which pass through
  flex_template.py     the Flex Templates' files (flex_template_metadata.json, flex_template_flags.json, and
                       the compaction template's flex_template_compact_*.json), generated

Guarantees: nothing here imports Beam or TensorFlow (pipeline/cloud/ runs it without .venv); no module imports
one listed below it, so there is no import circle; a flag is added by declaring it on its field, and the
generated files are then rewritten by `python -m pipeline.options.flex_template --write` (a test fails until).
"""

from shardsmith.errors import UsageError  # where it was importable from before shardsmith/errors.py

__all__ = ["UsageError"]
