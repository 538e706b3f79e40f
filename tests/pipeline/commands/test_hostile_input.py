"""Hostile input, made here (no downloads): broken, odd and malicious files and manifests. For every case: no
crash, records + errors == rows, every record decodes to its recorded shape, and every error line names the
file and gives a reason a person understands."""

from __future__ import annotations

import io
import json
import random
import struct
import zlib
from pathlib import Path

import pytest
from PIL import Image

from shardsmith.output_folder.layout import published_dir

# uri (as written in the manifest) -> expected outcome: ("record", channels) or ("error", words in the reason).
# None: either outcome is acceptable, as long as a record decodes to its recorded shape.
EXPECTED: dict[str, tuple | None] = {}


def _save(path: Path, image: Image.Image, fmt: str, **kwargs) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **kwargs)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(out.getvalue())
    return out.getvalue()


def _noise(size=(64, 48), mode="RGB", seed=0) -> Image.Image:
    rng = random.Random(seed)
    image = Image.new("RGB", size)
    image.putdata([tuple(rng.randrange(256) for _ in range(3)) for _ in range(size[0] * size[1])])
    return image.convert(mode)


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _bomb_png() -> bytes:
    """A valid PNG header claiming 100,000 x 100,000 pixels (10 G pixels) with a tiny body."""
    header = struct.pack(">IIBBBBB", 100_000, 100_000, 8, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", header)
            + _png_chunk(b"IDAT", zlib.compress(b"\0" * 1000)) + _png_chunk(b"IEND", b""))


def make_corpus(root: Path) -> list[tuple[str, str, str]]:
    """Writes the files; returns manifest rows (split, uri, label). Good images are in train for both labels."""
    img = root / "img"
    rows: list[tuple[str, str, str]] = []

    def add(uri: str, expected, split: str = "train", label: str = "a"):
        rows.append((split, uri, label))
        EXPECTED[uri] = expected

    for i in range(30):  # enough good rows that the bad ones stay a minority
        _save(img / f"good_{i}.jpg", _noise(seed=i), "JPEG")
        add(f"img/good_{i}.jpg", ("record", 3), label="ab"[i % 2])
    jpeg = (img / "good_0.jpg").read_bytes()
    png = _save(img / "ref.png", _noise(seed=99), "PNG")
    add("img/ref.png", ("record", 3))

    add("img/missing.jpg", ("error", "not found"))
    (img / "empty.jpg").write_bytes(b"")
    add("img/empty.jpg", ("error", "empty"))
    (img / "truncated.jpg").write_bytes(jpeg[: len(jpeg) // 2])
    add("img/truncated.jpg", ("error", "truncated"))
    (img / "truncated.png").write_bytes(png[: len(png) // 2])
    add("img/truncated.png", ("error", ""))
    gif = _save(img / "ok.gif", _noise(seed=3), "GIF")
    (img / "truncated.gif").write_bytes(gif[: len(gif) // 2])
    add("img/truncated.gif", None)
    webp = _save(img / "ok.webp", _noise(seed=4), "WEBP")
    (img / "truncated.webp").write_bytes(webp[: len(webp) // 2])
    add("img/truncated.webp", ("error", ""))
    corrupt = bytearray(jpeg)
    for k in range(len(corrupt) // 3, len(corrupt) // 3 + 64):
        corrupt[k] = 0xFF
    (img / "corrupted.jpg").write_bytes(bytes(corrupt))
    add("img/corrupted.jpg", None)  # mid-stream corruption may still decode: accepted only if it does
    (img / "text.jpg").write_text("this is not an image\n")
    add("img/text.jpg", ("error", "not an image"))
    (img / "random.png").write_bytes(random.Random(5).randbytes(5000))
    add("img/random.png", ("error", "not an image"))
    (img / "bomb.png").write_bytes(_bomb_png())
    add("img/bomb.png", ("error", "pixels"))
    _save(img / "giant.png", _noise((400, 300), seed=6), "PNG")  # ~360 KB, over --max_image_bytes below
    add("img/giant.png", ("error", "--max_image_bytes"))
    _save(img / "cmyk.jpg", _noise(seed=7, mode="CMYK"), "JPEG")
    add("img/cmyk.jpg", ("record", 3))
    _save(img / "gray16.png", _noise(seed=8, mode="L").convert("I;16"), "PNG")
    add("img/gray16.png", ("record", 1))
    palette = _noise(seed=9).convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
    _save(img / "palette_transparent.png", palette, "PNG", transparency=0)
    add("img/palette_transparent.png", ("record", 4))
    _save(img / "gray_alpha.png", _noise(seed=10, mode="LA"), "PNG")
    add("img/gray_alpha.png", ("record", 2))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotated 90 degrees: decoders ignore it, so the stored shape is what is recorded
    _save(img / "exif_rotated.jpg", _noise((80, 40), seed=11), "JPEG", exif=exif)
    add("img/exif_rotated.jpg", ("record", 3))
    frames = [_noise(seed=s) for s in (12, 13, 14)]
    out = io.BytesIO()
    frames[0].save(out, "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
    (img / "animated.gif").write_bytes(out.getvalue())
    add("img/animated.gif", ("record", 3))
    _save(img / "picture.tiff", _noise(seed=15), "TIFF")
    add("img/picture.tiff", ("error", ""))
    _save(img / "palette.bmp", _noise(seed=16).convert("P"), "BMP")
    add("img/palette.bmp", None)
    _save(img / "ünïcødé 猫.jpg", _noise(seed=17), "JPEG")
    add("img/ünïcødé 猫.jpg", ("record", 3))
    _save(img / "with spaces.jpg", _noise(seed=18), "JPEG")
    add("img/with spaces.jpg", ("record", 3))
    _save(img / 'comma, "quoted".jpg', _noise(seed=19), "JPEG")
    add('img/comma, "quoted".jpg', ("record", 3))
    add("img/good_1.jpg", ("record", 3), label="b")  # a duplicate row: written twice, reported as duplicate
    return rows


def _csv_field(text: str) -> str:
    return '"' + text.replace('"', '""') + '"' if any(c in text for c in ',"') else text


@pytest.fixture(scope="module")
def hostile_build(tmp_path_factory):
    from pipeline import cli

    root = tmp_path_factory.mktemp("hostile")
    rows = make_corpus(root)
    lines = ["\ufeffsplit,image_uri,label"] + [f"{s},{_csv_field(u)},{lab}" for s, u, lab in rows]
    manifest_lines = {}
    for i, (_, uri, _) in enumerate(rows):
        manifest_lines[uri if uri not in manifest_lines else uri + "#2"] = i + 2
    bad_lines = [
        "",  # blank
        "train,img/good_2.jpg,a,surplus",
        "train",
        "holdout,img/good_3.jpg,a",
        "../../etc,img/good_4.jpg,a",  # a split that would escape the output folder
        "train,img/good_5.jpg,",
        "train,,a",
        '"train,img/good_6.jpg,a',  # unclosed quote
        "train,\udcff\udcfe,a",  # invalid UTF-8 below
    ]
    text = "\r\n".join(lines + bad_lines[:-1]) + "\r\n"
    raw = text.encode("utf-8") + b"train,\xff\xfe.jpg,a\r\n"
    (root / "manifest.csv").write_bytes(raw)
    out = root / "out"
    code = cli.main(["build", "--manifest", str(root / "manifest.csv"), "--output_dir", str(out), "--name", "h",
                     "--max_image_bytes", "200000", "--max_error_fraction", "0.9", "--num_shards", "2"])
    return root, out, code, rows, len(bad_lines) - 1  # the blank line is not a data row


def test_hostile_corpus_is_accounted_for_row_by_row(hostile_build, read_records, metadata_of):
    import tensorflow as tf

    root, out, code, rows, num_bad_lines = hostile_build
    assert code == 0
    metadata = metadata_of(out)
    errors_file = Path(published_dir(out)) / "errors.jsonl"
    errors = [json.loads(line) for line in errors_file.read_text(encoding="utf-8").splitlines()]
    records = [r for split in metadata["splits"] for shard in read_records(out, split) for r in shard]
    assert metadata["num_input_rows"] == len(rows) + num_bad_lines
    assert len(records) + len(errors) == metadata["num_input_rows"]
    assert len(EXPECTED) >= 25

    for record in records:
        decoded = tf.io.decode_image(record["image/encoded"], expand_animations=False)
        assert tuple(decoded.shape) == (record["image/height"], record["image/width"], record["image/channels"])
    recorded = {}
    for record in records:
        recorded.setdefault(record["image/filename"], []).append(record)
    failed = {e["uri"]: e for e in errors if e["uri"]}
    for uri, expected in EXPECTED.items():
        if expected is None:
            assert (uri in recorded) != (uri in failed), uri
            continue
        outcome, detail = expected
        if outcome == "record":
            assert uri in recorded, (uri, failed.get(uri))
            assert {r["image/channels"] for r in recorded[uri]} == {detail}, uri
        else:
            assert uri in failed, (uri, "was written")
            assert detail.lower() in failed[uri]["reason"].lower(), failed[uri]
    assert len(recorded["img/good_1.jpg"]) == 2
    for error in errors:
        assert error["reason"] and error["source"].endswith("manifest.csv") and error["line"] >= 2
        if error["stage"] != "manifest":
            assert error["uri"], error  # a file's error always names the file


def test_bad_manifest_lines_are_errors_with_their_line_numbers(hostile_build):
    root, out, _, rows, _ = hostile_build
    errors_file = Path(published_dir(out)) / "errors.jsonl"
    errors = [json.loads(line) for line in errors_file.read_text(encoding="utf-8").splitlines()]
    manifest_errors = {e["line"]: e["reason"] for e in errors if e["stage"] == "manifest"}
    first_bad = len(rows) + 2 + 1  # header, rows, then the blank line
    expected = ["wrong number of columns", "wrong number of columns", "unknown split", "unknown split",
                "empty label", "empty image uri", "malformed csv", "not valid utf-8"]
    for offset, words in enumerate(expected):
        assert words in manifest_errors[first_bad + offset].lower(), (first_bad + offset, manifest_errors)


def test_duplicate_rows_are_reported(hostile_build, metadata_of):
    _, out, _, _, _ = hostile_build
    duplicates = metadata_of(out)["duplicates"]
    assert duplicates["num_groups"] >= 1
    uris = [c["uri"] for group in duplicates["examples"] for c in group["copies"]]
    assert uris.count("img/good_1.jpg") == 2


@pytest.mark.parametrize(
    ("content", "words", "code"),
    [
        (b"split,image_uri,label\n", "no data rows", 1),
        (b"", "no data rows", 1),
        (bytes(range(256)) * 40, "holds binary data (NUL bytes)", 2),  # refused before the build
    ],
    ids=["header-only", "zero-rows", "binary-file"],
)
def test_manifests_without_usable_rows_fail_with_one_line(content, words, code, tmp_path, shardsmith):
    (tmp_path / "m.csv").write_bytes(content)
    result = shardsmith("build", "--manifest", tmp_path / "m.csv", "--output_dir", tmp_path / "out", "--name", "x")
    assert result.code == code
    assert result.err.strip().splitlines()[-1].startswith(
        "shardsmith check failed:" if code == 1 else "shardsmith: error: manifest")
    assert words in result.err
    assert "Traceback" not in result.err
    assert not (tmp_path / "out" / "metadata.json").exists()


def test_lines_that_break_the_parser_or_are_too_long_cost_one_error_row_each(tmp_path, image_set_factory,
                                                                            shardsmith, metadata_of):
    """JSON nested 100,000 deep (RecursionError in json.loads) and lines of several MiB, in a JSONL and a CSV
    manifest of one build: each is an error row with its line number, and every other row is written."""
    images = image_set_factory(tmp_path, {"a": {"train": 8}, "b": {"train": 8}})
    jsonl = [json.dumps({"split": s, "image_uri": u, "label": lab}) for s, u, lab in images.rows[:8]]
    jsonl[2:2] = ["[" * 100_000, '{"label": ' * 100_000]
    jsonl.insert(6, json.dumps({"split": "train", "image_uri": "img/a/x.jpg", "label": "a" * (3 << 20)}))
    (tmp_path / "m.jsonl").write_text("\n".join(jsonl) + "\n")
    lines = [f"{s},{u},{lab}" for s, u, lab in images.rows[8:]]
    lines.insert(3, "train,img/b/x.jpg," + "b" * (5 << 20))
    (tmp_path / "m.csv").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    result = shardsmith("build", "--manifest", tmp_path / "m.jsonl", "--manifest", tmp_path / "m.csv",
                        "--output_dir", out, "--name", "h", "--max_error_fraction", "0.5")
    assert result.code == 0, result.err
    errors_file = Path(published_dir(out)) / "errors.jsonl"
    errors = [json.loads(line) for line in errors_file.read_text().splitlines()]
    found = sorted((Path(e["source"]).name, e["line"], e["reason"]) for e in errors)
    assert found == [("m.csv", 4, "line is longer than 1 MiB"), ("m.jsonl", 3, "line could not be parsed"),
                     ("m.jsonl", 4, "line could not be parsed"), ("m.jsonl", 7, "line is longer than 1 MiB")]
    assert all("RecursionError" in e["detail"] for e in errors if e["reason"] == "line could not be parsed")
    assert metadata_of(out)["num_examples"] == 16
    assert metadata_of(out)["num_input_rows"] == 20
