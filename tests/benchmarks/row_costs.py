"""What one row costs in the launcher's per-row steps, each timed alone in this process: a batch of placed rows
pickled and unpickled (as it crosses a stage boundary), a row made, a field changed, a keyed hash, one
record's Example encoded and a CSV line split. Each figure is the median of `--repeats` timings. Not run by CI.

    python tests/benchmarks/row_costs.py --repeats 5

Beside each of the row's own figures, the same step done the way it was before 2026-11-26, for comparison: each
row pickled on its own reduce call, a frozen dataclass of the same fields, `dataclasses.replace`, a BLAKE2b keyed
anew for every hash; and as it was at d91cb5c: the Example with nothing kept encoded, a csv.reader per line.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import hashlib
import os
import pickle
import statistics
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shardsmith.format import example, example_wire  # noqa: E402
from shardsmith.images.load_images import ImageInfo  # noqa: E402
from shardsmith.manifest.csv_file import csv_fields  # noqa: E402
from shardsmith.placement import keyed_hash  # noqa: E402
from shardsmith.rows import ManifestRow, PlacedRow, RowBatch, pickled_as_field_values  # noqa: E402
from shardsmith.shard_writer.encode import image_example_chunks  # noqa: E402

BATCH_ROWS = 1024


@pickled_as_field_values
@dataclasses.dataclass(frozen=True, slots=True)
class FrozenRow:
    """ManifestRow's fields, as a frozen dataclass (what ManifestRow was before 2026-11-26)."""

    source: str
    source_index: int
    line: int
    uri: str
    resolved_uri: str
    split: str
    label: str
    size: int = -1
    label_id: int = -1
    annotation: object = None


def _row(line: int, cls=ManifestRow):
    uri = f"photos/{line // 1000:02d}/{line:07d}.jpg"
    return cls("/data/manifest.csv", 0, line, uri, f"/data/{uri}", "train", f"label_{line % 7}", 60_000 + line, 3)


def _keyed_anew(seed: int, purpose: bytes, *parts: str) -> int:
    digest = hashlib.blake2b(digest_size=8, key=str(seed).encode(), person=purpose)
    for part in parts:
        digest.update(part.encode("utf-8", "surrogatepass"))
        digest.update(b"\0")
    return int.from_bytes(digest.digest(), "big")


@contextlib.contextmanager
def _nothing_kept_encoded():
    """The Example encoder as it was before the writer kept its repeated fields encoded (after d91cb5c): the
    same functions, without their caches."""
    swapped = [(example, "repeated_int64_feature", example_wire.repeated_int64_feature.__wrapped__),
               (example, "repeated_text_feature", example_wire.repeated_text_feature.__wrapped__),
               (example_wire, "_repeated_entry_head", example_wire._entry_head)]
    kept = [(module, name, getattr(module, name)) for module, name, _ in swapped]
    for module, name, value in swapped:
        setattr(module, name, value)
    try:
        yield
    finally:
        for module, name, value in kept:
            setattr(module, name, value)


def _us(fn, per: int, repeats: int, number: int) -> float:
    return statistics.median(timeit.repeat(fn, number=number, repeat=repeats)) / number / per * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    batch = RowBatch(PlacedRow(_row(line), line % 8, 8, (line * 7919, 0, line)) for line in range(BATCH_ROWS))
    # Before: frozen rows, each pickled on its own reduce call (a plain list of them)
    frozen_batch = [PlacedRow(_row(line, FrozenRow), line % 8, 8, (line * 7919, 0, line)) for line in range(BATCH_ROWS)]
    packed, packed_before = pickle.dumps(batch, protocol=5), pickle.dumps(frozen_batch, protocol=5)
    row, frozen = _row(7), _row(7, FrozenRow)
    values = dataclasses.astuple(row)
    image = os.urandom(60_000)
    info = ImageInfo("jpeg", 480, 640, 3)
    csv_line = f"train,{row.uri},{row.label}"

    def _example_us_before() -> float:
        with _nothing_kept_encoded():
            return _us(lambda: image_example_chunks(row, image, info, "ab" * 32), 1, r, 5_000)

    r = args.repeats
    lines = [
        ("pickle a batch of placed rows, per row", _us(lambda: pickle.dumps(batch, protocol=5), BATCH_ROWS, r, 20),
         _us(lambda: pickle.dumps(frozen_batch, protocol=5), BATCH_ROWS, r, 20)),
        ("unpickle it, per row", _us(lambda: pickle.loads(packed), BATCH_ROWS, r, 20),
         _us(lambda: pickle.loads(packed_before), BATCH_ROWS, r, 20)),
        ("make a row", _us(lambda: ManifestRow(*values), 1, r, 20_000), _us(lambda: FrozenRow(*values), 1, r, 20_000)),
        ("change its size", _us(lambda: row.replaced(size=5), 1, r, 20_000),
         _us(lambda: dataclasses.replace(frozen, size=5), 1, r, 20_000)),
        ("keyed hash of (split, uri)", _us(lambda: keyed_hash(42, b"order", "train", row.uri), 1, r, 20_000),
         _us(lambda: _keyed_anew(42, b"order", "train", row.uri), 1, r, 20_000)),
        ("encode a 60 KB image's Example (chunks)", _us(lambda: image_example_chunks(row, image, info, "ab" * 32),
                                                         1, r, 5_000),
         _example_us_before()),
        ("a CSV line's fields", _us(lambda: csv_fields(csv_line), 1, r, 20_000),
         _us(lambda: next(csv.reader([csv_line], strict=True)), 1, r, 20_000)),
    ]
    print(f"{'step':<44} {'now us':>8} {'before us':>10}")
    for name, now, before in lines:
        print(f"{name:<44} {now:8.2f} {'' if before is None else f'{before:10.2f}'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
