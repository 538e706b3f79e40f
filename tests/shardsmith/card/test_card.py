"""The dataset card (shardsmith card, card.html in every build's folder), checked in a real browser: the page
as Chromium renders it, not its HTML source."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from PIL import Image, ImageStat

from pipeline import cli
from shardsmith.card import MAX_CARD_BYTES

HOSTILE_LABEL = "<img src=x onerror=alert(1)>"
SCRIPT_LABEL = "<script>window.pwned=1</script>"


def _build(manifest: Path, out: Path, *extra: str) -> None:
    assert cli.main(["build", "--manifest", str(manifest), "--output_dir", str(out), "--name", "demo",
                     "--max_error_fraction", "0.2", *extra]) == 0


def _build_folder(out: Path) -> Path:
    return out / json.loads((out / "metadata.json").read_text())["build_dir"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    """The README's demo: `shardsmith sample` and the build `bash launch.sh demo` runs."""
    root = tmp_path_factory.mktemp("demo")
    assert cli.main(["sample", str(root / "data")]) == 0
    _build(root / "data" / "manifest.csv", root / "tfrecords", "--num_shards", "train=4,validation=2,test=2")
    return root / "tfrecords"


def _rendered_tables(page) -> list[list[list[str]]]:
    return page.evaluate("[...document.querySelectorAll('table')].map(t => [...t.rows].map(r => "
                         "[...r.cells].map(c => c.innerText.trim())))")


def test_the_demo_card_shows_every_label_counts_as_metadata_errors_and_a_picture(demo, browser, tmp_path):
    card = _build_folder(demo) / "card.html"
    assert card.is_file() and card.stat().st_size < MAX_CARD_BYTES
    metadata = json.loads((demo / "metadata.json").read_text())
    page = browser.open(card)
    # The example grid: for every label of train, images the browser decoded.
    grids = page.evaluate("Object.fromEntries([...document.querySelectorAll('.grid')].map(g => "
                          "[g.dataset.labelId, [...g.querySelectorAll('img')].filter(i => i.naturalWidth > 0)"
                          ".length]))")
    assert {metadata["labels"][int(k)]: n for k, n in grids.items()} == {"circle": 5, "square": 5, "triangle": 5}
    # The splits table, as rendered, holds metadata.json's counts.
    tables = _rendered_tables(page)
    splits = next(t for t in tables if t[0][:2] == ["split", "records"])
    assert {row[0]: int(row[1].replace(",", "")) for row in splits[1:]} == {
        name: entry["num_examples"] for name, entry in metadata["splits"].items()}
    labels = next(t for t in tables if t[0][0] == "label")
    splits_of = metadata["splits"].values()
    assert {row[0]: int(row[-1]) for row in labels[1:]} == {
        label: sum(e["label_counts"].get(label, 0) for e in splits_of) for label in metadata["labels"]}
    errors = next(t for t in tables if t[0][:2] == ["reason", "rows"])
    assert {row[0]: int(row[1]) for row in errors[1:]} == metadata["errors_by_reason"]
    assert all(row[2] for row in errors[1:]), "each reason shows an example from errors.jsonl"
    text = page.evaluate("document.body.innerText")
    assert "No earlier version is kept to compare with." in text
    assert "distinct labels per batch of 32" in text
    screenshot = page.screenshot()
    with Image.open(io.BytesIO(screenshot)) as shot:
        assert shot.width == 1280 and shot.height > 2000
        assert max(ImageStat.Stat(shot.convert("RGB")).stddev) > 20, "the rendered page is not blank"
    docs_copy = os.environ.get("SHARDSMITH_CARD_SCREENSHOT")  # docs/card.png is made by this test
    if docs_copy:
        with Image.open(io.BytesIO(screenshot)) as shot:
            shot.crop((0, 0, 1280, min(shot.height, 2600))).convert("RGB").resize((960, 1950)).save(
                docs_copy, optimize=True)


def test_labels_and_uris_from_the_input_render_as_text(browser, tmp_path, small_image):
    rows = []
    for i, label in enumerate([HOSTILE_LABEL, SCRIPT_LABEL, "plain"] * 4):
        uri = f"img/{i}.png"
        small_image(tmp_path / uri, i)
        rows.append(("train", uri, label))
    rows.append(("train", "img/\x1b[2Jcleared.png", "plain"))  # a URI with an escape sequence: an error row
    manifest = tmp_path / "m.csv"
    manifest.write_text("split,image_uri,label\n" + "".join(f'{s},{u},"{x}"\n' for s, u, x in rows))
    out = tmp_path / "out"
    _build(manifest, out, "--max_error_fraction", "0.5")
    page = browser.open(_build_folder(out) / "card.html")
    assert page.evaluate("document.querySelectorAll('img[src=\"x\"], script').length") == 0
    assert page.evaluate("typeof window.pwned") == "undefined" and browser.dialogs == []
    headings = page.evaluate("[...document.querySelectorAll('h3.label')].map(h => h.firstChild.textContent.trim())")
    assert set(headings) == {HOSTILE_LABEL, SCRIPT_LABEL, "plain"}
    text = page.evaluate("document.body.innerText")
    assert "\\x1b[2Jcleared.png" in text and "\x1b" not in text


@pytest.fixture
def small_image():
    def write(path: Path, seed: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (40 + seed, 30), ((seed * 40) % 256, 90, (seed * 90) % 256)).save(path)

    return write


def test_a_detection_card_draws_the_boxes(tmp_path, browser):
    root = tmp_path / "data"
    (root / "img").mkdir(parents=True)
    lines = []
    for i in range(12):
        Image.new("RGB", (120, 90), (250, 250, 250)).save(root / "img" / f"{i}.jpg", quality=95)
        lines.append(f"TRAIN,img/{i}.jpg,{'car' if i % 2 else 'person'},0.2,0.2,,,0.7,0.8,,")
    (root / "boxes.csv").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    _build(root / "boxes.csv", out, "--task", "detection")
    page = browser.open(_build_folder(out) / "card.html")
    # The thumbnails are white images: pixels of the first box colour (#e6194b) are the boxes drawn on them.
    reds = page.evaluate("""Promise.all([...document.querySelectorAll('.grid img')].map(async img => {
        const c = document.createElement('canvas'); c.width = img.naturalWidth; c.height = img.naturalHeight;
        const g = c.getContext('2d'); g.drawImage(img, 0, 0);
        const d = g.getImageData(0, 0, c.width, c.height).data; let n = 0;
        for (let i = 0; i < d.length; i += 4) if (d[i] > 180 && d[i + 1] < 90 && d[i + 2] < 120) n++;
        return n; }))""")
    assert len(reds) == 10 and all(n > 50 for n in reds), reds  # 5 per label, every one with its box


def test_a_night_card_says_what_changed_and_lists_the_versions(tmp_path, browser, shardsmith, small_image):
    rows = []
    for i in range(30):
        uri = f"img/{i}.png"
        small_image(tmp_path / uri, i)
        rows.append(("train" if i % 5 else "test", uri, "cat" if i % 2 else "dog"))
    manifest = tmp_path / "m.csv"
    manifest.write_text("split,image_uri,label\n" + "".join(f"{s},{u},{x}\n" for s, u, x in rows[:20]))
    out = tmp_path / "out"
    _build(manifest, out, "--incremental")
    first = json.loads((out / "metadata.json").read_text())["build_id"]
    for i in range(30, 34):  # a new label in the night
        small_image(tmp_path / f"img/{i}.png", i)
        rows.append(("train", f"img/{i}.png", "emu"))
    manifest.write_text("split,image_uri,label\n" + "".join(f"{s},{u},{x}\n" for s, u, x in rows[2:]))
    _build(manifest, out, "--incremental")
    page = browser.open(_build_folder(out) / "card.html")
    text = page.evaluate("document.body.innerText")
    assert f"Built on version {first}" in text and "labels added: emu" in text
    change = next(t for t in _rendered_tables(page) if t[0] == ["split", "label", "before", "after", "change"])
    assert ["train", "emu", "0", "4", "+4"] in change[1:]
    kept = next(t for t in _rendered_tables(page) if t[0][:2] == ["version", "started"])
    assert [row[0].split()[0] for row in kept[1:]][1] == first and "(published)" in kept[1][0]
    # An older version's card on demand, into its own folder under the lock.
    result = shardsmith("card", out, "--version", first)
    assert result.code == 0, result.err
    assert (out / "builds" / first / "card.html").is_file()
    older = browser.open(out / "builds" / first / "card.html").evaluate("document.body.innerText")
    assert "No earlier version is kept to compare with." in older


def test_no_card_writes_none_and_retention_removes_a_card_with_its_version(tmp_path, shardsmith, small_image):
    for i in range(6):
        small_image(tmp_path / f"img/{i}.png", i)
    manifest = tmp_path / "m.csv"
    manifest.write_text("split,image_uri,label\n" + "".join(f"train,img/{i}.png,{'ab'[i % 2]}\n" for i in range(6)))
    out = tmp_path / "out"
    _build(manifest, out, "--no_card")
    first = _build_folder(out)
    assert not (first / "card.html").exists()
    assert shardsmith("card", out).code == 0 and (first / "card.html").is_file()
    nowhere = shardsmith("card", out, "--output", tmp_path / "no" / "card.html")
    assert nowhere.code == 2 and "its folder does not exist" in nowhere.err
    no_split = shardsmith("card", out, "--split", "test")
    assert no_split.code == 2 and "split 'test' is not in this dataset (train)" in no_split.err
    assert any("card.html" in p.name for p in (first / ".shardsmith-written").iterdir()), "listed in its record"
    _build(manifest, out, "--overwrite", "--keep_builds", "1", "--keep_days", "0")
    assert not first.exists(), "the card went with its version: no folder left for a person to clean"


def test_a_card_of_many_labels_stays_small_and_says_what_it_left_out(tmp_path, small_image):
    from shardsmith.card import card_bytes

    rows = []
    for i in range(240):
        small_image(tmp_path / f"img/{i}.png", i)
        rows.append(("train", f"img/{i}.png", f"label{i // 2:03d}"))
    manifest = tmp_path / "m.csv"
    manifest.write_text("split,image_uri,label\n" + "".join(f"{s},{u},{x}\n" for s, u, x in rows))
    out = tmp_path / "out"
    _build(manifest, out)
    html = card_bytes(str(out), json.loads((out / "metadata.json").read_text())["build_id"], per_label=10)
    assert len(html) < MAX_CARD_BYTES
    text = html.decode()
    assert text.count('class="grid"') == 50 and "the first 50 labels by id of 120" in text
    assert "the 60 largest of 120 labels" in text


def test_readcheck_reads_each_way_saves_its_figures_and_the_card_shows_them(demo, browser, shardsmith):
    result = shardsmith("readcheck", demo, "--files", "--batch_size", "8")
    assert result.code == 0, result.err
    folder = _build_folder(demo)
    figures = json.loads((folder / "readcheck.json").read_text())
    readers = {r["reader"]: r for r in figures["readers"]}
    assert set(readers) == {"load", "torch", "decode_limit", "tf_files", "torch_files"}
    for name in ("load", "decode_limit", "tf_files"):  # TensorFlow is always here; torch may be skipped
        assert readers[name]["images"] == 94 - 8 and readers[name]["images_per_s"] > 0, readers[name]
    assert "too few to judge" in figures["verdict"] and f"verdict: {figures['verdict']}" in result.out
    assert any(p.name.endswith("readcheck.json") for p in (folder / ".shardsmith-written").iterdir())
    page = browser.open(folder / "card.html")
    table = next(t for t in _rendered_tables(page) if t[0][:2] == ["reader", "images/s"])
    assert [row[0] for row in table[1:]] == [r["reader"] for r in figures["readers"]]
    wrong = shardsmith("readcheck", demo, "--split", "nope")
    assert wrong.code == 2 and "split 'nope' is not in this dataset" in wrong.err


def test_a_path_mode_card_draws_the_images_from_their_files(tmp_path, small_image):
    from shardsmith.card import card_bytes

    for i in range(8):
        small_image(tmp_path / f"img/{i}.png", i)
    manifest = tmp_path / "m.csv"
    manifest.write_text("split,image_uri,label\n" + "".join(f"train,img/{i}.png,{'ab'[i % 2]}\n" for i in range(8)))
    out = tmp_path / "out"
    _build(manifest, out, "--image_mode", "path")
    html = card_bytes(str(out), json.loads((out / "metadata.json").read_text())["build_id"]).decode()
    assert html.count('<img src="data:image/jpeg;base64,') == 8  # 4 a label, each read from its file


def test_a_version_naming_a_previous_outside_the_folder_is_compared_with_no_path_it_names(tmp_path, small_image):
    from shardsmith.card import card_bytes

    for i in range(6):
        small_image(tmp_path / f"img/{i}.png", i)
    manifest = tmp_path / "m.csv"
    manifest.write_text("split,image_uri,label\n" + "".join(f"train,img/{i}.png,{'ab'[i % 2]}\n" for i in range(6)))
    out = tmp_path / "out"
    _build(manifest, out, "--incremental")
    folder = _build_folder(out)
    own = json.loads((folder / "metadata.json").read_text())
    (tmp_path / "elsewhere").mkdir()  # a readable metadata.json outside the folder, as out/builds/../../elsewhere
    (tmp_path / "elsewhere" / "metadata.json").write_text((folder / "metadata.json").read_text())
    own["incremental"]["previous"] = "../../elsewhere"  # hostile: a path, not a build id
    (folder / "metadata.json").write_text(json.dumps(own, indent=2))
    html = card_bytes(str(out), folder.name).decode()
    assert "Against <code>" not in html  # nothing read through it: no comparison
    assert "No earlier version is kept to compare with." in html
