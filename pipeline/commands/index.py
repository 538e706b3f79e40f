"""`shardsmith index OUT`: writes the index files (`<shard>.idx`) of a build made before builds wrote them.

Guarantees: it writes index files only, into the build's own folder, each listed in the build's record before
it is written (so the build's removal removes them) and written atomically, while holding the output folder's
lock (no build runs meanwhile; the lock is checked again before each file). It never writes a shard or
metadata.json: readers and `verify` find an index file beside its shard by name. An index file is written only
from a shard read whole with both CRCs of every record checked and the record count metadata.json gives; one
already there with the right content is left as it is.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field

from pipeline.commands.shared import add_version_argument
from shardsmith import storage
from shardsmith.errors import UsageError
from shardsmith.format.build_record import BuildRecord, write_atomically
from shardsmith.format.naming import BUILD_ID, BUILD_RECORD, BUILDS_DIR, join
from shardsmith.progress_signal import ITEMS_DONE, set_total
from shardsmith.progress_signal import add as add_progress
from shardsmith.read.record_sequence import CorruptRecord, Records, scanned_index


@dataclass
class IndexReport:
    build_dir: str
    written: list[str] = field(default_factory=list)
    present: list[str] = field(default_factory=list)  # already there, with the right content
    failed: list[str] = field(default_factory=list)  # one line each: shards that could not be indexed
    index_bytes: int = 0
    shard_bytes: int = 0

    @property
    def ok(self) -> bool:
        return not self.failed

    def verdict(self) -> str:
        share = f"{100 * self.index_bytes / self.shard_bytes:.3f}%" if self.shard_bytes else "n/a"
        line = (f"shardsmith index: {len(self.written)} index files written, {len(self.present)} already there, "
                f"in {self.build_dir} ({self.index_bytes} bytes, {share} of the shards' bytes)")
        return line + (f"; FAILED for {len(self.failed)} shard(s)" if self.failed else "")


def _build_id(folder: str, output_dir: str) -> str:
    """The build id of a build's folder; UsageError for a dataset whose files are not in a build folder."""
    parent, _, build_id = folder.rpartition("/")
    if parent.rpartition("/")[2] == BUILDS_DIR and BUILD_ID.fullmatch(build_id):
        return build_id
    raise UsageError(f"{output_dir} keeps its shards outside a build folder (made before builds had folders): "
                     "build it again to get index files")


def index_build(output_dir: str, version: str | None = None) -> IndexReport:
    """Writes the missing index files of the published build (or kept build `version`) of `output_dir`."""
    from shardsmith.output_folder import lock_for_command

    output_dir = os.fspath(output_dir).rstrip("/")
    try:
        split_records = {split: Records(output_dir, split, version)
                         for split in _splits(output_dir, version)}
    except (FileNotFoundError, ValueError) as e:
        raise UsageError(str(e)) from None
    any_split = next(iter(split_records.values()), None)
    if any_split is None:
        raise UsageError(f"{output_dir}: the build has no splits")
    if any_split.compression == "gzip":
        raise UsageError(f"{output_dir} holds gzip shards, which get no index files (offsets into a gzip stream "
                         "cannot be sought); build with --compression none to read it at random")
    folder = any_split.folder
    build_id = _build_id(folder, output_dir)
    record = storage.read_bytes(join(folder, BUILD_RECORD))
    if record is None or BuildRecord.from_json(record).version < 2:
        raise UsageError(f"{folder}'s build record lists no written files (an early build): its removal would "
                         "leave index files behind; build it again to get index files")
    lock = lock_for_command(output_dir, build_id)
    report = IndexReport(folder)
    set_total(sum(shard.num_records for records in split_records.values() for shard in records.shards))
    try:
        for records in split_records.values():
            for shard in records.shards:
                _index_shard(records, shard, lock.guard, report)
                add_progress(ITEMS_DONE, shard.num_records)
    finally:
        lock.release()
    return report


def _splits(output_dir: str, version: str | None) -> list[str]:
    from shardsmith.output_folder import open_version

    return list(open_version(output_dir, version).metadata.splits)


def _index_shard(records: Records, shard, guard, report: IndexReport) -> None:
    try:
        index = scanned_index(shard.path, records.compression, records.file_format)
    except (CorruptRecord, OSError) as e:
        report.failed.append(str(e) if isinstance(e, CorruptRecord) else f"{shard.path}: {e}")
        return
    if len(index) != shard.num_records:
        report.failed.append(f"{shard.path}: {len(index)} records, metadata.json says {shard.num_records}")
        return
    content = index.to_bytes()
    report.shard_bytes += index.end
    report.index_bytes += len(content)
    name = shard.index_path.rsplit("/", 1)[-1]
    if storage.read_bytes(shard.index_path) == content:
        report.present.append(name)
        return
    guard.check()
    write_atomically(shard.index_path, content)
    report.written.append(name)


def register_subparser(parsers: argparse._SubParsersAction) -> None:
    """Adds `shardsmith index` and its arguments."""
    parser = parsers.add_parser(
        "index", help="write the index files (<shard>.idx) of a build made before builds wrote them",
        description="Reads every shard of the published build (checksums checked) and writes its index file "
                    "beside it, under the folder's lock; never changes a shard or metadata.json.")
    parser.add_argument("output_dir", help="a finished dataset folder (local or gs://)")
    add_version_argument(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> IndexReport:
    """`shardsmith index`: the progress line while it reads, a line per shard that failed, then the verdict."""
    from pipeline.running.progress import Task, task_progress

    with task_progress(Task("index", "indexed")):
        report = index_build(args.output_dir, args.version)
        for line in report.failed:
            print(f"  FAIL  {line}")
        print(report.verdict(), flush=True)
        return report
