"""Text from a manifest is never a terminal command: control characters (C0, DEL, C1) make a label an error row,
and wherever shardsmith prints text that came from its inputs (the build summary, `inspect`, `versions`, errors,
log lines), unprintable characters and bidirectional overrides are shown escaped (shardsmith/printable.py)."""

from __future__ import annotations

import json

import pytest

from shardsmith.printable import control_characters, shown

SCREEN_CLEAR = "cat\x1b[2J\x1b]0;title\x07"
RIGHT_TO_LEFT = "dog\u202egnihton"  # a valid label: it prints escaped


@pytest.mark.parametrize("text, expected", [
    ("plain label", "plain label"),
    (SCREEN_CLEAR, "cat\\x1b[2J\\x1b]0;title\\x07"),
    ("c\x00at", "c\\x00at"),
    ("del\x7f c1\x9b", "del\\x7f c1\\x9b"),
    (RIGHT_TO_LEFT, "dog\\u202egnihton"),
    ("zero\u200bwidth \u2066isolate\u2069", "zero\\u200bwidth \\u2066isolate\\u2069"),
    ("café 猫", "café 猫"),
])
def test_unprintable_characters_are_shown_escaped_and_the_rest_as_written(text, expected):
    assert shown(text) == expected
    assert shown(f"{text}\n{text}", keep_newlines=True) == f"{expected}\n{expected}"
    assert shown("a\nb") == "a\\x0ab"


def test_control_characters_in_a_label_are_an_error_row_and_nothing_raw_reaches_the_terminal(
        version_rows, shardsmith, tmp_path):
    rows = version_rows()
    good = [(split, uri, RIGHT_TO_LEFT if label == "dog" else label) for split, uri, label in rows]
    hostile = [("train", rows[0][1], SCREEN_CLEAR), ("train", rows[1][1], "c\x00at"),
               ("train", rows[2][1], "del\x7f"), ("test", rows[3][1], "c1\x9b")]
    manifest = tmp_path / "m.csv"
    manifest.write_text("split,image_uri,label\n" + "".join(f"{s},{u},{label}\n" for s, u, label in good + hostile),
                        encoding="utf-8")
    out = tmp_path / "out"
    built = shardsmith("build", "--manifest", manifest, "--output_dir", out, "--name", "pets",
                       "--max_error_fraction", "0.5")
    assert built.code == 0, built.err
    meta = json.loads((out / "metadata.json").read_text())
    errors = [json.loads(line) for line in (out / meta["build_dir"] / "errors.jsonl").read_text().splitlines()]
    assert sorted((e["reason"], e["detail"]) for e in errors) == sorted(
        ("label contains a control character", f"label '{shown(label)}'") for _, _, label in hostile)
    assert "\x00" not in (out / meta["build_dir"] / "labels.txt").read_text()
    assert RIGHT_TO_LEFT in meta["labels"]
    for said in (built, shardsmith("inspect", out), shardsmith("versions", out)):
        printed = said.out + said.err
        assert not any(c in printed for c in "\x1b\x00\x7f\x9b\u202e"), printed
    assert "dog\\u202egnihton" in built.out + shardsmith("inspect", out).out
    assert "cat\\x1b[2J" in built.out  # the error's example, escaped
    assert all(control_characters(label) for _, _, label in hostile)
