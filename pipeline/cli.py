"""The `shardsmith` command: the dispatch to its commands and their exit codes. Each command is a module of
pipeline/commands/ that adds its own parser (`register_subparser`); `build` runs the pipeline, `sample` writes the
demo dataset, `verify` reads a dataset back and checks every record, `inspect` reports on one (and draws PNGs),
`schema` prints --feature flags for a manifest, `index` writes the index files of a build made before builds wrote
them, `versions` lists the kept versions, `tag`/`untag` pin one against retention, `compact` rewrites a version's
generations, `card` writes a version's dataset card and `readcheck` measures how fast this machine reads it;
`image`, `dataflow`, `template` and `run-template` build and run it on Google Cloud (pipeline/cloud/, which needs
neither Beam nor TensorFlow: a command's module is imported only when the parser is made).

Flags are taken only as spelled in full: an abbreviation (`--num_shard`) is an unknown flag, not the flag it
begins. Errors a user can fix print one line and exit 2; a dataset that fails its final checks exits 1 with the
check's message; anything else prints one line and how to see the traceback (SHARDSMITH_DEBUG=1).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
import traceback
from typing import TYPE_CHECKING

from pipeline.cloud import COMMANDS as CLOUD_COMMANDS
from pipeline.running.command_logs import DEBUG_ENV
from pipeline.running.heap_tuning import keep_large_blocks_mapped
from pipeline.running.quiet_logs import VERBOSE_ENV, quiet
from shardsmith.errors import UsageError
from shardsmith.printable import shown

if TYPE_CHECKING:
    from shardsmith.format.metadata_schema import Metadata

COMMANDS = ("build", "sample", "verify", "inspect", "schema", "index", "versions", "tag", "untag", "compact", "card",
            "readcheck")
VERBOSE_COMMANDS = ("build", "verify", "inspect")  # take --verbose, read here before anything imports TensorFlow


class ExactFlagsParser(argparse.ArgumentParser):
    """An ArgumentParser that takes a flag only as spelled in full: argparse's prefix matching would read a
    schedule's `--num_shard 4` as `--num_shards 4`. Its subcommands' parsers are of this class too."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **{"allow_abbrev": False, **kwargs})


def _parsers() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The `shardsmith` parser, and each command's own (by name), as its module in pipeline/commands/ adds it."""
    from pipeline.commands import (
        build,
        card,
        compact,
        index,
        inspect,
        readcheck,
        sample,
        schema,
        tag,
        untag,
        verify,
        versions,
    )

    parser = ExactFlagsParser(
        prog="shardsmith",
        description="Balanced, shuffled, sharded TFRecords from an image manifest, with Apache Beam.",
        epilog="the Google Cloud commands' settings: shardsmith COMMAND --help",
    )
    commands = parser.add_subparsers(dest="command", required=True,
                                     metavar="{" + ",".join([*COMMANDS, *CLOUD_COMMANDS]) + "}")
    for module in (build, sample, verify, inspect, schema, index, versions, tag, untag, compact, card, readcheck):
        module.register_subparser(commands)
    for name, line in CLOUD_COMMANDS.items():  # listed here; `main` hands them to pipeline.cloud
        commands.add_parser(name, help=line, add_help=False)
    return parser, dict(commands.choices)


def _parser() -> argparse.ArgumentParser:
    """The `shardsmith` parser, every command's included."""
    return _parsers()[0]


def run(argv: list[str] | None = None) -> Metadata | str | int | None:
    """Runs a subcommand and returns its result (a cloud command's: its exit status); raises on failure (see
    `main` for the exit codes)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] and argv[0] in VERBOSE_COMMANDS and "--verbose" in argv[1:]:
        os.environ[VERBOSE_ENV] = "1"  # before quiet(), and inherited by the writer processes
    quiet()  # TensorFlow's C++ log lines off unless --verbose or SHARDSMITH_VERBOSE=1 (pipeline/running/quiet_logs.py)
    keep_large_blocks_mapped()  # a stage's freed buffers go back to the system (pipeline/running/heap_tuning.py)
    if argv and argv[0] in CLOUD_COMMANDS:
        from pipeline.cloud.cli import main as cloud_main

        return cloud_main(argv)
    if argv and not argv[0].startswith("-") and argv[0] not in COMMANDS:
        import difflib

        close = difflib.get_close_matches(argv[0], [*COMMANDS, *CLOUD_COMMANDS], n=1)
        raise UsageError(f"unknown command {argv[0]!r}" + (f" (did you mean {close[0]}?)" if close else "")
                         + "; `shardsmith --help` lists the commands")
    parser, command_parsers = _parsers()
    if not argv or argv[0] not in COMMANDS:
        parser.parse_args(argv)  # prints usage and exits
    command, rest = argv[0], argv[1:]
    chosen = command_parsers[command]
    normalize_argv = chosen.get_default("normalize_argv")
    if normalize_argv is not None:  # before parsing: dashed spellings of the command's flags, say
        rest = normalize_argv(rest)
    if chosen.get_default("beam_flags"):  # what argparse does not know are Apache Beam's flags
        args, beam_args = parser.parse_known_args([command, *rest])
        return args.run(args, beam_args)
    args = parser.parse_args([command, *rest])
    return args.run(args)


def _one_line(error: BaseException) -> str:
    from shardsmith.output_folder import LOCK_LOST_MARKER
    from transforms.report import CHECK_FAILED_MARKER

    text = str(error)
    for marker in (CHECK_FAILED_MARKER, LOCK_LOST_MARKER):
        if marker not in text:
            continue
        # Runners (and the shard writer processes) wrap a step's exception in their own text;
        # keep the step's own sentence.
        text = text[text.index(marker):]
        for end in ("\n", " [while running", "\" [while running"):
            if end in text:
                text = text[: text.index(end)]
        break
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    # Beam's multi-line errors ("Pipeline has validations errors:") put the reason on the next line.
    return f"{lines[0]} {lines[1]}" if lines[0].endswith(":") and len(lines) > 1 else lines[0]


def main(argv: list[str] | None = None) -> int:
    """The `shardsmith` command (argv None: sys.argv) or a program's call of it; returns the exit status."""
    status = _main(argv)
    if argv is None:
        _exit_at_once(status)
    return status


def _exit_at_once(status: int) -> None:
    """Ends the `shardsmith` process once its work is done and reported: atexit handlers run (logging's flush,
    multiprocessing's joins), the interpreter's own teardown is skipped. Finalizing Beam's and TensorFlow's
    modules took 2-7 s after the summary had printed (measured on 2 cores), a wait the summary cannot count."""
    import atexit

    sys.stdout.flush()
    sys.stderr.flush()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _main(argv: list[str] | None) -> int:
    from pipeline.running.command_clock import process_age_s, set_command_started

    set_command_started(time.monotonic() - (process_age_s() if argv is None else 0.0))
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in CLOUD_COMMANDS:  # before Beam is imported; these report their own mistakes
        from pipeline.cloud.cli import main as cloud_main

        return cloud_main(argv)
    from pipeline.running.interrupts import Interrupts
    from shardsmith.errors import UsageError

    interrupts = Interrupts()
    # What the process held before this command (a test session's, a notebook's, TensorFlow's objects) is left
    # out of the collections until the command ends: they then scan only the command's own objects. With
    # TensorFlow loaded, a demo build took 1.5-1.7 s before, 0.9-1.0 s after (build_overhead.py --with_tensorflow).
    gc.freeze()
    try:
        with interrupts:
            result = run(argv)
        return 0 if getattr(result, "ok", True) else 1  # verify: the verdict line is already printed
    except UsageError as e:
        print(shown(f"shardsmith: error: {e}", keep_newlines=True), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("shardsmith: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # the one place a traceback is turned into a sentence
        if interrupts.seen:
            print("shardsmith: interrupted", file=sys.stderr)
            return 130
        if os.environ.get(DEBUG_ENV):
            raise
        from shardsmith.errors import worker_usage_error_in

        usage = worker_usage_error_in(str(e))
        if usage is not None:
            print(shown(f"shardsmith: error: {usage}", keep_newlines=True), file=sys.stderr)
            return 2
        traceback.clear_frames(e.__traceback__)  # their locals hold the failed graph: let finally collect it
        from shardsmith.output_folder import LOCK_LOST_MARKER
        from transforms.report import CHECK_FAILED_MARKER

        line = _one_line(e)
        if line.startswith((CHECK_FAILED_MARKER, LOCK_LOST_MARKER)):
            print(shown(line), file=sys.stderr)
        else:
            print(f"shardsmith: the job failed: {type(e).__name__}: {shown(line[:500])}\n"
                  f"shardsmith: run again with {DEBUG_ENV}=1 to see the traceback", file=sys.stderr)
        return 1
    finally:
        # A finished graph's DoFns (tf.transform's with --feature) hold protobuf objects in reference cycles. Left
        # to the collection at interpreter exit, which runs after sys.modules is emptied, protobuf's upb
        # extension crashes freeing them (SIGSEGV in PyUpb_RepeatedContainer_Dealloc, exit status 139 instead
        # of ours); collected here, while every module is still there, they go quietly.
        gc.collect()
        gc.unfreeze()
        set_command_started(None)


if __name__ == "__main__":
    sys.exit(main())
