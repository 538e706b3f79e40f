"""What checksumming a shard as it is written costs (metadata.json's per-shard `crc32c`, and the SHA-256 builds
recorded before it; docs/performance.md, "Where the time goes"):

    PYTHONPATH=. python tests/benchmarks/shard_hash_cost.py --record_bytes 100000
    PYTHONPATH=. python tests/benchmarks/shard_hash_cost.py --dataset out/flowers --compression gzip

Writes the same framed records (random bytes of one size, or a built dataset's records) record by record, as
the shard writer does (header, record, footer), to a local file: plainly, through the writer's HashedFile (CRC32C),
and through SHA-256 as builds before it did; best of --repeats each. Prints the times and what each checksum adds
per GB of records written.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import hashlib
import os
import tempfile
import time

from shardsmith.format.tfrecord import frame, iter_records
from shardsmith.shard_writer.shard_output import HashedFile


def _records(args) -> list[bytes]:
    if args.dataset is None:
        return [os.urandom(args.record_bytes) for _ in range(64)]  # SHA-256's cost does not depend on content
    records: list[bytes] = []
    for path in sorted(glob.glob(f"{args.dataset}/builds/*/*.tfrecord-*[0-9]")):
        with open(path, "rb") as f:
            records += list(iter_records(f))
    return records


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--record_bytes", type=int, default=100_000)
    parser.add_argument("--dataset", default=None, help="a built dataset whose (uncompressed) records to write")
    parser.add_argument("--compression", choices=("none", "gzip"), default="none")
    parser.add_argument("--megabytes", type=int, default=512, help="records written per run")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    framed = [(*frame(record), record) for record in _records(args)]
    one_pass = sum(len(head) + len(record) + len(tail) for head, tail, record in framed)
    passes = max(1, args.megabytes * 1_000_000 // one_pass)
    zipped = args.compression == "gzip"
    with tempfile.TemporaryDirectory() as folder:
        target = os.path.join(folder, "shard")

        def plain():
            return gzip.GzipFile(target, "wb", mtime=0, compresslevel=6) if zipped else open(target, "wb")  # noqa: SIM115

        def hashed():
            return HashedFile(target, gzip_compressed=zipped)

        def sha256_hashed():
            return _Sha256File(plain())

        def timed(open_file) -> float:
            started = time.perf_counter()
            with open_file() as out:
                for _ in range(passes):
                    for head, tail, record in framed:
                        out.write(head)
                        out.write(record)
                        out.write(tail)
            return time.perf_counter() - started

        best_plain = min(timed(plain) for _ in range(args.repeats))
        best_hashed = min(timed(hashed) for _ in range(args.repeats))
        best_sha256 = min(timed(sha256_hashed) for _ in range(args.repeats))
    total_gb = one_pass * passes / 1e9
    print(f"{len(framed)} records x {passes} = {total_gb:.2f} GB, compression {args.compression}: plain "
          f"{best_plain:.2f} s, CRC32C {best_hashed:.2f} s, SHA-256 {best_sha256:.2f} s; CRC32C adds "
          f"{(best_hashed - best_plain) / total_gb * 1000:.0f} ms per GB of records, SHA-256 "
          f"{(best_sha256 - best_plain) / total_gb * 1000:.0f} ms")
    return 0


class _Sha256File:
    """A file whose bytes pass through SHA-256 as they are written (uncompressed ones, for gzip: the comparison
    is of the hash's cost per byte)."""

    def __init__(self, file):
        self._file = file
        self._digest = hashlib.sha256()

    def write(self, data: bytes) -> None:
        self._digest.update(data)
        self._file.write(data)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._file.close()


if __name__ == "__main__":
    raise SystemExit(main())
