"""The read check (`shardsmith readcheck`, pipeline/commands/readcheck.py): how fast this machine reads a version,
and why. Each reader reads one pass of the split (or --limit records), decoded and resized to --image_size, in a
process of its own (so one reader's threads and caches never slow the next):

    load          shardsmith.load() (tf.data: parallel interleave, shuffle, parallel decode)
    torch         shardsmith.torch.StreamingShardDataset + DataLoader(num_workers=--workers)  (when torch is here)
    decode_limit  load()'s own decode and resize over the same images already in memory (at most
                  LIMIT_IMAGES): what decoding alone allows, the fastest any reader of these images can go
    tf_files      with --files: the same images as files, one by one, through tf.data (read_file, decode, resize)
    torch_files   with --files: a careful torch Dataset over the files (Pillow's reduced-scale decode, resize)

Rates are images/s from the end of each reader's first batch (start-up and graph building left out); CPU per
image over the same span, the reader's process and its DataLoader workers (psutil). The verdict says which is
faster here and why: decode-bound (a reader near the decode limit: shards and files then read alike from a local
disk), or I/O- or start-up-bound. This module measures (`measure_in_process`) and judges (`verdict`, `report`);
the command saves the figures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from shardsmith.card.readers import Settings, measure

MIN_JUDGED = 500  # fewer images timed than this: too few to judge
DECODE_BOUND = 0.7  # a reader at this share of the decode limit or more is decode-bound
READER_DEADLINE_S = 1_800
SHARD_READERS = ("load", "torch")
FILE_READERS = ("tf_files", "torch_files")


def measure_in_process(name: str, settings: Settings) -> dict:
    """One reader's pass in a fresh interpreter (`python -m shardsmith.card.read_check _one ...`); a reader that
    cannot run here (torch not installed, files gone) comes back as a row saying why."""
    command = [sys.executable, "-m", "shardsmith.card.read_check", "_one", name, json.dumps(settings.__dict__)]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=READER_DEADLINE_S)
    except subprocess.TimeoutExpired:
        return {"reader": name, "skipped": f"did not finish in {READER_DEADLINE_S} s"}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"reader": name, "skipped": f"failed: {last[:200]}"}
    return json.loads(lines[-1])


def verdict(results: list[dict]) -> str:
    """One line: which reader is fastest here, against the decode limit and, when measured, the files."""
    timed = {r["reader"]: r for r in results if not r.get("skipped")}
    if not timed:
        return "no reader could run here"
    shards = [timed[n] for n in SHARD_READERS if n in timed]
    files = [timed[n] for n in FILE_READERS if n in timed]
    if not shards:
        return "no shard reader could run here"
    best = max(shards, key=lambda r: r["images_per_s"])
    line = f"{best['reader']} reads {best['images_per_s']:,.0f} images/s"
    if min(r["images"] for r in [*shards, *files]) < MIN_JUDGED:
        return line + f"; fewer than {MIN_JUDGED} images were timed, too few to judge (read a larger split)"
    limit = timed.get("decode_limit")
    if limit:
        share = best["images_per_s"] / limit["images_per_s"]
        line += f", {share:.0%} of the decode limit ({limit['images_per_s']:,.0f} images/s)"
        bound = ("decode-bound: decoding, not reading, sets the pace" if share >= DECODE_BOUND else
                 "not decode-bound: reading or the pipeline holds it back (slow disk or object store, too few "
                 "workers)")
        line += f"; {bound}"
    if files:
        fastest = max(files, key=lambda r: r["images_per_s"])
        ratio = best["images_per_s"] / fastest["images_per_s"]
        line += (f"; {ratio:.2f}x the files' best ({fastest['reader']}, {fastest['images_per_s']:,.0f} images/s)"
                 + (" - from a local disk, decoding costs both the same; on an object store, where each file is a "
                    "request, shards win by far more" if 0.8 <= ratio <= 1.25 else ""))
    return line


def report(figures: dict) -> str:
    lines = [f"{'reader':<14}{'images/s':>10}{'CPU us/image':>14}{'images':>9}  how"]
    for r in figures["readers"]:
        if r.get("skipped"):
            lines.append(f"{r['reader']:<14}{'-':>10}{'-':>14}{'-':>9}  skipped: {r['skipped']}")
        else:
            lines.append(f"{r['reader']:<14}{r['images_per_s']:>10,.0f}{r['cpu_us_per_image']:>14,.0f}"
                         f"{r['images']:>9,}  {r['how']}")
    return "\n".join([*lines, f"verdict: {figures['verdict']}"])


if __name__ == "__main__" and sys.argv[1:2] == ["_one"]:
    print(json.dumps(measure(sys.argv[2], Settings(**json.loads(sys.argv[3])))), flush=True)
