"""A dataset read back and checked against metadata.json (`shardsmith verify`, pipeline/commands/verify.py, prints
the report): `verify(output_dir)` reads every record of every shard and returns a `VerifyReport`.

Per shard file (shards.py, in a thread pool, one shard per thread): the file exists and has the size metadata.json
gives; every record's framing holds (length, length CRC, data, data CRC; masked CRC32C, as TFRecord writes it),
read as a stream, and decompressed as a stream for .gz shards; every record parses as a `tf.train.Example` holding
exactly the keys of metadata.json's "features", one value each; the label id names the label text it carries;
`image/key/sha256` is the SHA-256 of `image/encoded`; `image/format` matches the bytes' signature; and every image
(or, with `sample`, a deterministic sample spread evenly over all shards) decodes with `tf.io.decode_image(...,
expand_animations=False)` to exactly (height, width, channels). Then the counts: records and label counts per
shard, per split and in total, against metadata.json; each shard file's checksum (CRC32C, or SHA-256 for builds
that recorded it, computed from the bytes as they are read, compressed for .gz) and its first record's
image/key/sha256 against the shard's `crc32c` (or `sha256`) and `first_key` (absent from builds made before they
were recorded: a note, not a problem), and its index file (`<shard>.idx`, when metadata.json lists one or one lies
beside it) against the records read. Then the folder: shard file names follow the template, no shard file lies
there that metadata.json does not list, labels.txt and errors.jsonl agree with it, and so do the TFDS files when
present.

Memory: each thread holds one record (plus a 1 MiB read buffer); never a shard. Threads are enough to use all
cores: SHA-256, CRC32C, file reads and TensorFlow's image decoders release the GIL, and they are the cost.
Files are read through shardsmith.storage, so local folders and gs:// both work.

By concern: records.py checks one record, shards.py one shard file, folder.py the folder and the totals,
report.py holds the results and the verdict.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from shardsmith.output_folder import dataset_dir
from shardsmith.progress_signal import set_total
from shardsmith.read.dataset_checks.folder import check_folder, load_metadata
from shardsmith.read.dataset_checks.report import MAX_PROBLEMS_PER_SHARD, Problem, ShardCheck, VerifyReport, shard_line
from shardsmith.read.dataset_checks.shards import check_shard, decode_indices

__all__ = ["MAX_PROBLEMS_PER_SHARD", "Problem", "ShardCheck", "VerifyReport", "load_metadata", "shard_line", "verify"]


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))  # the cores this process may use (containers, taskset)
    except AttributeError:
        return os.cpu_count() or 1


def verify(output_dir: str, sample: int | None = None, workers: int | None = None,
           progress: Callable[[ShardCheck], None] | None = None) -> VerifyReport:
    """Checks the dataset in `output_dir`; `progress(ShardCheck)` is called as each shard finishes, in order."""
    metadata = load_metadata(output_dir)
    output_dir = dataset_dir(output_dir.rstrip("/"), metadata)  # the published build's folder
    import tensorflow as tf  # noqa: F401  (imported once here, not by the first threads at once; not timed)

    started = time.monotonic()
    decode = decode_indices(metadata, sample)
    jobs = metadata.all_shards()
    expected = sum(shard.num_examples for _, shard in jobs)
    set_total(expected)  # for a watching launcher (`shardsmith verify`'s progress line)
    shards: list[ShardCheck] = []
    with ThreadPoolExecutor(max(1, workers or _cores())) as pool:
        futures = [pool.submit(check_shard, output_dir, split, shard, metadata,
                               None if decode is None else decode.get(shard.file, set()))
                   for split, shard in jobs]
        for future in futures:
            shards.append(future.result())
            if progress:
                progress(shards[-1])
    problems = check_folder(output_dir, metadata, shards)
    return VerifyReport(output_dir, shards, problems, expected, time.monotonic() - started)
