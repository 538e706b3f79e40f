"""Does the reduced-scale JPEG decode of `--validate decode` reject everything a full decode rejects? Not run by
CI in full (tests/shardsmith/images/test_reduced_decode.py runs a small corpus through the same code).

    python tests/benchmarks/decode_agreement.py [--tensorflow] [--json results.json]

Damaged corpus: the six TFRecorder photos (real camera JPEGs, 320x213 to 800x600), each also re-encoded as a
progressive JPEG, a greyscale JPEG and a PNG. Every file is damaged in three ways:

    truncated   cut at 20 points spread over the file (5% ... 95% of its length)
    flipped     one random bit flipped, at 100 random positions (one file per position)
    marker      one JPEG marker (0xFF xx) removed, at 10 random markers (JPEGs only)

Each damaged file is validated by `inspect_image(..., validate="decode")` at JPEG scale 1 (the full decode),
2, 4 and 8 (the default, JPEG_VALIDATION_SCALE), and with --tensorflow by `tf.io.decode_image`, the decoder that
reads the records back. The table counts, per format and damage, the files each decoder rejects, and the
disagreements with the full decode: "missed" (full rejects, reduced accepts: must be 0) and "extra" (reduced
rejects, full accepts). Then the CPU per undamaged image (process time, 50 rounds) at each scale.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from PIL import Image

from shardsmith.images.load_images import JPEG_VALIDATION_SCALE, ImageRejected, inspect_image

PHOTOS = Path(__file__).resolve().parents[1] / "data" / "tfrecorder" / "images"
TRUNCATION_POINTS = 20
FLIPPED_POSITIONS = 100
REMOVED_MARKERS = 10
SCALES = (1, 2, 4, JPEG_VALIDATION_SCALE)
TIMING_ROUNDS = 50


def source_files(photos: Path) -> list[tuple[str, bytes]]:
    """(kind, bytes): each photo as it is, and re-encoded as progressive JPEG, greyscale JPEG and PNG."""
    files = []
    for path in sorted(photos.rglob("*.jpg")):
        data = path.read_bytes()
        image = Image.open(io.BytesIO(data)).convert("RGB")
        files.append(("jpeg", data))
        files.append(("progressive jpeg", _encode(image, "JPEG", quality=90, progressive=True)))
        files.append(("greyscale jpeg", _encode(image.convert("L"), "JPEG", quality=85)))
        files.append(("png", _encode(image, "PNG")))
    return files


def _encode(image: Image.Image, fmt: str, **kwargs) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **kwargs)
    return out.getvalue()


def damaged(data: bytes, rng: random.Random, truncations: int = TRUNCATION_POINTS,
            flips: int = FLIPPED_POSITIONS, markers: int = REMOVED_MARKERS) -> Iterator[tuple[str, bytes]]:
    """(damage, bytes) for each damaged copy of `data`; deterministic for a given `rng` state."""
    for i in range(1, truncations + 1):
        yield "truncated", data[: len(data) * i // (truncations + 1)]
    for _ in range(flips):
        copy = bytearray(data)
        copy[rng.randrange(len(copy))] ^= 1 << rng.randrange(8)
        yield "flipped", bytes(copy)
    if data[:2] == b"\xff\xd8":
        # Marker starts: 0xFF followed by neither a stuffed zero, a fill byte nor a restart marker.
        starts = [k for k in range(2, len(data) - 1)
                  if data[k] == 0xFF and data[k + 1] not in (0x00, 0xFF) and not 0xD0 <= data[k + 1] <= 0xD7]
        for k in rng.sample(starts, min(markers, len(starts))):
            yield "marker", data[:k] + data[k + 2:]


def verdict(data: bytes, jpeg_scale: int) -> bool:
    """True if shardsmith's decode validation accepts the file at this JPEG scale."""
    try:
        inspect_image(data, "decode", jpeg_scale=jpeg_scale)
    except ImageRejected:
        return False
    return True


def tensorflow_verdict(data: bytes) -> bool:
    import tensorflow as tf

    try:
        tf.io.decode_image(data, expand_animations=False)
    except (tf.errors.InvalidArgumentError, tf.errors.UnknownError):
        return False
    return True


def agreement(files: list[tuple[str, bytes]], seed: int = 0, with_tensorflow: bool = False,
              **damage) -> dict[tuple[str, str], Counter]:
    """Per (format, damage): counts of files, rejects per decoder, and missed/extra rejects against scale 1."""
    rng = random.Random(seed)
    table: dict[tuple[str, str], Counter] = {}
    for kind, data in files:
        for how, bad in damaged(data, rng, **damage):
            row = table.setdefault((kind, how), Counter())
            row["files"] += 1
            accepted = {scale: verdict(bad, scale) for scale in SCALES}
            for scale, ok in accepted.items():
                row[f"rejected at 1/{scale}"] += not ok
                row[f"missed at 1/{scale}"] += (not accepted[1]) and ok
                row[f"extra at 1/{scale}"] += accepted[1] and not ok
            if with_tensorflow:
                row["rejected by tf.io.decode_image"] += not tensorflow_verdict(bad)
    return table


def cpu_per_image(files: list[tuple[str, bytes]], rounds: int = TIMING_ROUNDS) -> dict[str, dict[int, float]]:
    """Microseconds of process time per validation, per format and JPEG scale."""
    result: dict[str, dict[int, float]] = {}
    for kind in dict(files):
        same_kind = [data for k, data in files if k == kind]
        result[kind] = {}
        for scale in SCALES:
            start = time.process_time()
            for _ in range(rounds):
                for data in same_kind:
                    inspect_image(data, "decode", jpeg_scale=scale)
            result[kind][scale] = (time.process_time() - start) / (rounds * len(same_kind)) * 1e6
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--photos", type=Path, default=PHOTOS)
    parser.add_argument("--tensorflow", action="store_true", help="also count tf.io.decode_image's rejects")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    files = source_files(args.photos)
    if not files:
        print(f"no photos under {args.photos}", file=sys.stderr)
        return 2
    table = agreement(files, with_tensorflow=args.tensorflow)
    columns = ["files", *(f"rejected at 1/{s}" for s in SCALES)]
    columns += ["rejected by tf.io.decode_image"] if args.tensorflow else []
    columns += [f"missed at 1/{s}" for s in SCALES[1:]] + [f"extra at 1/{s}" for s in SCALES[1:]]
    print("| format | damage | " + " | ".join(columns) + " |")
    print("|---|---|" + "---:|" * len(columns))
    for (kind, how), row in table.items():
        print(f"| {kind} | {how} | " + " | ".join(str(row[c]) for c in columns) + " |")
    cpu = cpu_per_image(files)
    print()
    print("| format (undamaged) | " + " | ".join(f"CPU us at 1/{s}" for s in SCALES) + " |")
    print("|---|" + "---:|" * len(SCALES))
    for kind, by_scale in cpu.items():
        print(f"| {kind} | " + " | ".join(f"{by_scale[s]:.0f}" for s in SCALES) + " |")
    if args.json:
        args.json.write_text(json.dumps({"agreement": {f"{k} / {h}": dict(r) for (k, h), r in table.items()},
                                         "cpu_us": cpu}, indent=1))
    missed = sum(row[f"missed at 1/{JPEG_VALIDATION_SCALE}"] for row in table.values())
    print(f"\nfiles the full decode rejects and the default reduced decode accepts: {missed}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
