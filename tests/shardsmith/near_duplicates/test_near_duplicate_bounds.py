"""--near_duplicates stays bounded on hostile data: many identical-looking images (blank PNGs with distinct bytes)
are one group, summarised with a count and a few examples, not n^2/2 pairs; and the hashing pass of `drop` goes
through the writer's decompression-bomb guard. Both builds run in a child process under an address-space cap,
so a regression fails the test (and reports its peak RSS) instead of taking the machine's memory."""

from __future__ import annotations

import io
import json
import os
import resource
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from PIL import Image, PngImagePlugin

from shardsmith.images.load_images import ImageRejected, open_image
from shardsmith.near_duplicates.identical_signatures import MAX_EXPANDED_GROUP, CollapsedRows, collapse_identical
from shardsmith.near_duplicates.near_duplicate_search import HashedImage, bucket_candidates
from shardsmith.near_duplicates.perceptual_hash import ImageSignature, signature_of_bytes
from shardsmith.output_folder.layout import published_dir
from shardsmith.settings import DEFAULT_MAX_PIXELS

ROOT = Path(__file__).resolve().parents[3]
ADDRESS_SPACE_CAP = 4_000_000_000  # the build's own virtual memory: a quadratic build dies at this, not the host
THREAD_STACK = 2 << 20  # glibc sizes thread stacks by RLIMIT_STACK: 8 MB each would spend the cap on stacks
DEADLINE_S = 1800  # a hung build fails the test instead of hanging it; no assertion on time is made
BLANK_IMAGES = 1000
BOMB_SIDE = 28_000
# A build's own peak RSS depends on the machine (0.26 GB here, 0.59 GB on CI for the same build), so each test
# compares with a control build of 20 plain blank images on the same machine. Before the fixes, one decoded bomb
# (784 MB of pixels) took the build 0.78 GB above the control, and the blank images' pairs 0.58 GB above it and
# growing when the deadline stopped it; a fixed build stays within a few MB of it.
MAX_RSS_ABOVE_CONTROL = 300_000_000
SPLIT_CYCLE = ("train", "train", "train", "validation", "test")
# The child runs the CLI and prints its own peak RSS (the build and its in-process Beam workers), whatever it
# ended with; its helper processes (tf.transform's) are left out.
_CHILD = """
import resource, sys
from pipeline import cli
try:
    code = cli.main(sys.argv[1:])
finally:
    print(f"PEAK_RSS_KB {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}", flush=True)
sys.exit(code)
"""


def _cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_CAP, ADDRESS_SPACE_CAP))
    resource.setrlimit(resource.RLIMIT_STACK, (THREAD_STACK, THREAD_STACK))


def _capped_build(*args) -> tuple[subprocess.CompletedProcess, int]:
    """(the finished child, its own peak RSS in bytes) of `shardsmith build ARGS` under the address-space cap."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", _CHILD, "build", *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=DEADLINE_S, preexec_fn=_cap_memory)
    peaks = [int(line.split()[1]) for line in done.stdout.splitlines() if line.startswith("PEAK_RSS_KB ")]
    assert done.returncode == 0 and peaks, f"build failed ({done.returncode}): {done.stderr[-3000:]}"
    print(f"build process peak RSS {peaks[-1] / 1e6:.2f} GB")  # shown with pytest -s
    return done, peaks[-1] * 1024


def _published(out: Path) -> Path:
    return Path(published_dir(out))


def _errors(out: Path) -> list[dict]:
    return [json.loads(line) for line in (_published(out) / "errors.jsonl").read_text().splitlines()]


def _blank_pngs(root: Path, count: int) -> Path:
    """`count` all-black 16x16 PNGs, each with a text chunk of its own (distinct bytes, the same pixels)."""
    root.mkdir(parents=True, exist_ok=True)
    rows = ["split,image_uri,label"]
    for i in range(count):
        info = PngImagePlugin.PngInfo()
        info.add_text("frame", str(i))
        Image.new("L", (16, 16), 0).save(root / f"blank_{i:05d}.png", pnginfo=info)
        rows.append(f"{SPLIT_CYCLE[i % len(SPLIT_CYCLE)]},blank_{i:05d}.png,{'ab'[i % 2]}")
    (root / "manifest.csv").write_text("\n".join(rows) + "\n")
    return root / "manifest.csv"


@pytest.fixture(scope="module")
def control_peak_rss(tmp_path_factory) -> int:
    """The peak RSS of a `drop` build of 20 blank images, nothing hostile in them, on this machine."""
    root = tmp_path_factory.mktemp("control")
    _, peak_rss = _capped_build("--manifest", _blank_pngs(root / "set", 20), "--output_dir", root / "out",
                                "--name", "d", "--near_duplicates", "drop", "--max_error_fraction", "1")
    return peak_rss


def test_a_thousand_blank_images_are_one_group_not_half_a_million_pairs(tmp_path, control_peak_rss):
    manifest = _blank_pngs(tmp_path / "blank", BLANK_IMAGES)
    out = tmp_path / "out"
    done, peak_rss = _capped_build("--manifest", manifest, "--output_dir", out, "--name", "d",
                                   "--near_duplicates", "drop", "--max_error_fraction", "1")
    metadata = json.loads((out / "metadata.json").read_text())
    near = metadata["near_duplicates"]
    assert BLANK_IMAGES > MAX_EXPANDED_GROUP
    assert near["num_identical_groups"] == 1 and near["num_identical_images"] == BLANK_IMAGES
    group = near["identical_groups"][0]
    train = sum(split == "train" for split in SPLIT_CYCLE) * BLANK_IMAGES // len(SPLIT_CYCLE)
    assert group["size"] == BLANK_IMAGES and group["splits"] == {
        "train": train, "validation": BLANK_IMAGES // 5, "test": BLANK_IMAGES // 5}
    assert group["representative"] == "blank_00000.png" and len(group["examples"]) == 3 and group["low_detail"]
    assert near["num_pairs"] == 0  # one signature: nothing else to pair with
    assert (_published(out) / "near_duplicates.jsonl").read_bytes() == b""
    dropped = [e for e in _errors(out) if e["stage"] == "duplicate"]
    assert len(dropped) == near["num_dropped"] == BLANK_IMAGES - train
    assert {e["detail"] for e in dropped} == {"near duplicate of blank_00000.png in train (distance 0)"}
    assert metadata["num_examples"] == train
    assert "1 group of 1000 identical-looking images" in done.stdout
    assert peak_rss < control_peak_rss + MAX_RSS_ABOVE_CONTROL, \
        f"peak RSS {peak_rss / 1e9:.2f} GB, control {control_peak_rss / 1e9:.2f} GB"


def _bomb_png(path: Path, side: int) -> None:
    """A grey side x side PNG of zeros, written row by row: side^2 / 1000 bytes on disk, side^2 decoded."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    compressor, row = zlib.compressobj(9), b"\x00" * (side + 1)  # filter byte 0, then the row
    data = b"".join([*(compressor.compress(row) for _ in range(side)), compressor.flush()])
    header = struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", data) + chunk(b"IEND", b""))


def test_drop_hashes_through_the_decompression_bomb_guard(tmp_path, control_peak_rss):
    """The hashing pass of `drop` used to decode any size (MAX_IMAGE_PIXELS=None) before the writer's check.
    The bombs are 28000x28000 grey (784 MB each decoded): under the cap the build process has about 1 GB to spare
    (TensorFlow and Beam reserve the rest of the address space), so a bigger bomb would only fail to allocate in
    the hashing pass, which swallowed the MemoryError, and the test could not see the decode."""
    manifest = _blank_pngs(tmp_path / "set", 20)
    for name in ("bomb_1.png", "bomb_2.png"):
        _bomb_png(tmp_path / "set" / name, BOMB_SIDE)
    width, height = struct.unpack(">II", (tmp_path / "set" / "bomb_1.png").read_bytes()[16:24])  # IHDR
    assert width * height > DEFAULT_MAX_PIXELS
    with manifest.open("a") as f:
        f.write("train,bomb_1.png,a\ntest,bomb_2.png,b\n")
    out = tmp_path / "out"
    _, peak_rss = _capped_build("--manifest", manifest, "--output_dir", out, "--name", "d",
                                "--near_duplicates", "drop", "--max_error_fraction", "1")
    bombs = {e["uri"]: e for e in _errors(out) if e["uri"].startswith("bomb_")}
    assert set(bombs) == {"bomb_1.png", "bomb_2.png"}
    assert all("decompression bomb" in e["reason"] and f"{BOMB_SIDE}x{BOMB_SIDE}" in e["detail"]
               for e in bombs.values())
    assert peak_rss < control_peak_rss + MAX_RSS_ABOVE_CONTROL, \
        f"peak RSS {peak_rss / 1e9:.2f} GB, control {control_peak_rss / 1e9:.2f} GB: a bomb was decoded"


def _hashed(phash: int, line: int, split: str = "train", structure: bytes = bytes(range(1, 64))) -> HashedImage:
    return HashedImage(ImageSignature(phash, structure, bytes(8), 16), split, "a", f"img/{line}.png", 0, line)


def test_a_big_group_of_one_signature_is_one_row_to_compare_and_holds_few_rows():
    rows = [_hashed(7, line, SPLIT_CYCLE[line % 5]) for line in range(MAX_EXPANDED_GROUP * 50, 0, -1)]
    collapsed = collapse_identical(lambda: iter(rows))
    (representative,) = collapsed.compared
    assert (representative.line, representative.split, representative.identical_images) == (1, "train", len(rows))
    group = collapsed.group.to_dict()
    assert group["size"] == len(rows) and list(group["splits"]) == ["train", "validation", "test"]
    assert group["examples"] == ["img/1.png", "img/2.png", "img/3.png"] and group["representative"] == "img/1.png"
    assert sorted(f.line for f in collapsed.followers) == list(range(2, len(rows) + 1))
    small = [_hashed(7, line) for line in range(MAX_EXPANDED_GROUP)]
    assert collapse_identical(lambda: iter(small)) == CollapsedRows(small)  # compared row by row, as before


def test_a_bucket_dense_with_distinct_look_alikes_is_capped_before_any_pair_is_formed():
    structures = [bytes((i + j) % 100 + 1 for j in range(63)) for i in range(60)]
    members = [_hashed(0, line, structure=structure) for line, structure in enumerate(structures)]
    counted = bucket_candidates(members, 10, limit=100)
    assert counted.over(100) and counted.found == [] and 100 < counted.count < 60 * 59 // 2
    assert bucket_candidates(members, 10, limit=None).count == 60 * 59 // 2


def test_every_hash_goes_through_the_pixel_guard():
    data = io.BytesIO()
    Image.new("RGB", (20, 20), "red").save(data, "PNG")
    assert signature_of_bytes(data.getvalue(), max_pixels=400) is not None
    assert signature_of_bytes(data.getvalue(), max_pixels=399) is None
    with pytest.raises(ImageRejected, match="decompression bomb"):
        open_image(data.getvalue(), max_pixels=399)
