"""`shardsmith sample DIR`: writes the demo dataset (pipeline/sample.py makes it) and says where its manifest is."""

from __future__ import annotations

import argparse


def register_subparser(parsers: argparse._SubParsersAction) -> None:
    """Adds `shardsmith sample` and its arguments."""
    parser = parsers.add_parser("sample", help="write a small demo dataset (no download)")
    parser.add_argument("directory")
    parser.add_argument("--per_label", type=int, default=40, help="images per label (default 40)")
    parser.add_argument("--seed", type=int, default=0)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> str:
    """`shardsmith sample`: returns the manifest's path."""
    from pipeline.sample import make_sample

    manifest = make_sample(args.directory, args.per_label, args.seed)
    print(f"shardsmith: wrote a demo dataset; its manifest is {manifest}")
    return manifest
