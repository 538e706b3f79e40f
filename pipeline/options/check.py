"""`shardsmith build`'s arguments checked as a real run checks them, without running anything and without Beam
or TensorFlow (only the standard library and this checkout): unknown flags with a suggestion, missing required
flags, bad values. The Dataflow launcher (pipeline/cloud/commands.py) calls it before a real run and in its dry
run, so a mistake is one line before anything is installed or submitted. Input paths are not checked here:
Dataflow's manifests are on Cloud Storage, which the build reads when it starts.
"""

from __future__ import annotations

import argparse

from pipeline.options import beam_flags
from pipeline.options.arguments import (
    UsageError,
    add_build_arguments,
    build_options_from,
    normalize_flags,
    own_flag_names,
    reject_unknown_flags,
)


class _RaisingParser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UsageError(message)


def check_build_arguments(argv: list[str]) -> None:
    """Raises UsageError (one line) for any mistake `shardsmith build ARGV` would report before it starts."""
    own = own_flag_names()
    argv = normalize_flags(list(argv), own)
    reject_unknown_flags(argv, own, beam_flags.names())
    parser = _RaisingParser(prog="shardsmith build", add_help=False, allow_abbrev=False)
    add_build_arguments(parser)
    args, _ = parser.parse_known_args(argv)
    build_options_from(args)
