"""`shardsmith verify D`: reads every record of every shard back and checks it against metadata.json
(shardsmith/read/dataset_checks/ holds the checks); prints a line per shard as it finishes, the problems, and the
verdict as the last line; exit 1 on any problem (pipeline/cli.py).
"""

from __future__ import annotations

import argparse
import os

from pipeline.commands.shared import add_verbose_argument, add_version_argument
from shardsmith.errors import UsageError
from shardsmith.printable import shown
from shardsmith.read.dataset_checks import VerifyReport, load_metadata, shard_line, verify
from shardsmith.read.version_files import version_folder


def register_subparser(parsers: argparse._SubParsersAction) -> None:
    """Adds `shardsmith verify` and its arguments."""
    parser = parsers.add_parser(
        "verify", help="read every record back and check it against metadata.json (exit 1 on any problem)",
        description="Read every record of every shard: framing checksums, Example keys, SHA-256, image decode and "
                    "shape, counts and bytes against metadata.json. The last line is the verdict.")
    parser.add_argument("output_dir", help="a finished dataset folder (local or gs://)")
    parser.add_argument("--sample", type=int, default=None, metavar="N",
                        help="decode N images, spread evenly over all shards (default: every image); every "
                             "record is still read, checksummed, parsed and hashed")
    parser.add_argument("--workers", type=int, default=None, help="threads (default: one per core)")
    add_version_argument(parser)
    add_verbose_argument(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> VerifyReport:
    """`shardsmith verify`: the progress line while it reads (records checked), and the report."""
    from pipeline.running.progress import Task, task_progress

    with task_progress(Task("verify", "checked")):
        return _checked(args)


def _checked(args: argparse.Namespace) -> VerifyReport:
    """Prints a line per shard, the problems, and the verdict as the last line."""
    if args.sample is not None and args.sample < 0:
        raise UsageError("--sample must be 0 or more")
    if args.workers is not None and args.workers < 1:
        raise UsageError("--workers must be 1 or more")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    output_dir = version_folder(args.output_dir, args.version)
    load_metadata(output_dir)  # usage errors before anything is printed
    print(f"shardsmith verify {output_dir}", flush=True)
    report = verify(output_dir, args.sample, args.workers, progress=lambda s: print(shard_line(s), flush=True))
    problems = report.all_problems
    if problems:
        print(f"problems ({report.num_problems}):")
        for problem in problems[:100]:
            print(f"  {shown(problem.line())}")
        if report.num_problems > len(problems[:100]):
            print(f"  ... and {report.num_problems - len(problems[:100])} more")
    if report.unhashed_note():
        print(report.unhashed_note())
    print(report.verdict(), flush=True)
    return report
