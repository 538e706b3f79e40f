"""Memory: reading a Parquet manifest of many rows (shardsmith/manifest/parquet_file.py) with the parser the
build's read stage runs, next to the same rows as CSV. Each read runs in a fresh process, which reports its peak
RSS, its RSS before the first row (imports done) and rows/s. The peak should not grow with the number of rows: the
reader holds one batch of one row group's columns at a time. No images are read. Not run by CI.

    python tests/benchmarks/parquet_manifest.py                      # 50,000 and 200,000 rows
    python tests/benchmarks/parquet_manifest.py --rows 10000000      # the 10M-row file (about 2 minutes to write)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LABELS = 20


def write_manifests(folder: Path, num_rows: int, row_group_size: int) -> tuple[Path, Path]:
    """A label-sorted Parquet manifest of `num_rows` rows and the same rows as CSV, written in slices of a million
    rows (so writing a 10M-row file does not hold it either); cached in `folder`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet, csv = folder / f"manifest-{num_rows}.parquet", folder / f"manifest-{num_rows}.csv"
    if parquet.exists() and csv.exists():
        return parquet, csv
    folder.mkdir(parents=True, exist_ok=True)
    schema = pa.schema([("split", pa.string()), ("image_uri", pa.string()), ("label", pa.string())])
    splits = ("train",) * 8 + ("validation", "test")
    with pq.ParquetWriter(parquet, schema) as writer, csv.open("w") as text:
        text.write("split,image_uri,label\n")
        for start in range(0, num_rows, 1_000_000):
            rows = range(start, min(num_rows, start + 1_000_000))
            labels = [f"class_{i * LABELS // num_rows:02d}" for i in rows]
            uris = [f"img/{label}/{i:08d}.jpg" for i, label in zip(rows, labels, strict=True)]
            split = [splits[i % len(splits)] for i in rows]
            writer.write_table(pa.table({"split": split, "image_uri": uris, "label": labels}, schema=schema),
                               row_group_size=row_group_size)
            text.writelines(f"{s},{u},{lab}\n" for s, u, lab in zip(split, uris, labels, strict=True))
    return parquet, csv


def _read(path: str) -> None:
    """In this process: every row of one manifest through the build's parser; prints one JSON line."""
    from shardsmith.manifest import ManifestFormat, ManifestParser, resolve_sources

    if path.endswith(".parquet"):
        import pyarrow.parquet  # noqa: F401  (imported before the baseline: the library is not the reader's memory)
    (source,) = resolve_sources((path,))
    before = _status_mb("VmRSS")
    started = time.perf_counter()
    rows = errors = 0
    for item in ManifestParser(ManifestFormat()).parse(source):
        rows += 1
        errors += type(item).__name__ == "ErrorRow"
    seconds = time.perf_counter() - started
    peak = _status_mb("VmHWM")
    print(json.dumps({"rows": rows, "errors": errors, "seconds": round(seconds, 1), "rss_before_mb": round(before),
                      "peak_rss_mb": round(peak), "rows_per_s": round(rows / seconds)}))


def _status_mb(field: str) -> float:
    """VmRSS (now) or VmHWM (the peak) of this process from /proc, in MB. Not getrusage's ru_maxrss: Linux carries
    that across exec, so a child would report the peak of the parent it was forked from."""
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith(f"{field}:"))
    return int(line.split()[1]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="50000,200000", help="row counts, comma-separated (default 50000,200000)")
    parser.add_argument("--row_group_size", type=int, default=1 << 20, help="rows per row group (pyarrow's default)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/shardsmith-parquet-manifest"))
    parser.add_argument("--read", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.read:
        _read(args.read)
        return
    print(f"{'rows':>10} {'format':>8} {'file MB':>8} {'seconds':>8} {'rows/s':>9} {'RSS before':>11} {'peak RSS':>9}")
    for num_rows in (int(n) for n in args.rows.split(",")):
        for path in write_manifests(args.workdir, num_rows, args.row_group_size):
            done = subprocess.run([sys.executable, __file__, "--read", str(path)], cwd=ROOT, capture_output=True,
                                  text=True, check=True, env={"PYTHONPATH": str(ROOT), "PATH": ""})
            result = json.loads(done.stdout.strip().splitlines()[-1])
            assert result["rows"] == num_rows and result["errors"] == 0, result
            print(f"{num_rows:>10} {path.suffix[1:]:>8} {path.stat().st_size / 1e6:>8.1f} {result['seconds']:>8} "
                  f"{result['rows_per_s']:>9} {result['rss_before_mb']:>8} MB {result['peak_rss_mb']:>6} MB")


if __name__ == "__main__":
    main()
