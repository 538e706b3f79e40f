"""Labels that look the same (shardsmith/manifest/look_alike_labels.py): `café` composed and decomposed, `Cat` beside
`cat` in a manifest of lowercase labels. A build reports them in its summary and metadata.json, and
`--normalize_labels nfc` merges the Unicode kind, for manifest rows, --label_file and class folders alike."""

from __future__ import annotations

import json
import shutil

import pytest

from shardsmith.manifest.look_alike_labels import look_alike_groups

COMPOSED, DECOMPOSED = "caf\u00e9", "cafe\u0301"


@pytest.mark.parametrize("records, expected", [
    ({"cat": 3, "dog": 2}, []),
    ({COMPOSED: 3, DECOMPOSED: 2, "dog": 1}, [("unicode", [DECOMPOSED, COMPOSED], [2, 3])]),
    ({"Cat": 1, "cat": 5, "dog": 2}, [("case", ["Cat", "cat"], [1, 5])]),
    ({"Cat": 1, "cat": 5, "Dog": 2, "emu": 1}, []),  # mixed case elsewhere: case tells classes apart here
    ({"CAT": 1, "Cat": 5, "DOG": 2}, [("case", ["CAT", "Cat"], [1, 5])]),  # the others upper case
    ({COMPOSED: 1, DECOMPOSED: 1, "CAF\u00c9": 4, "dog": 0}, [("unicode", [DECOMPOSED, COMPOSED], [1, 1])]),
])
def test_groups_are_of_unicode_form_first_then_of_case_where_the_other_labels_are_one_case(records, expected):
    groups = look_alike_groups(records)
    assert [(g.kind, g.labels, g.records) for g in groups] == expected
    assert look_alike_groups(dict(reversed(list(records.items())))) == groups


def _rows(version_rows, decomposed_every: int):
    rows = []
    for i, (split, uri, label) in enumerate(version_rows()):
        if label == "cat":
            label = DECOMPOSED if i % decomposed_every == 0 else COMPOSED
        rows.append((split, uri, label))
    return rows


def test_a_build_reports_look_alike_labels_and_nfc_merges_them(version_rows, csv_manifest, shardsmith, tmp_path):
    manifest = csv_manifest("m", _rows(version_rows, 3))
    out = tmp_path / "out"
    plain = shardsmith("build", "--manifest", manifest, "--output_dir", out, "--name", "pets")
    assert plain.code == 0, plain.err
    meta = json.loads((out / "metadata.json").read_text())
    assert sorted(meta["labels"]) == sorted([COMPOSED, DECOMPOSED, "dog", "emu"])
    (group,) = meta["look_alike_labels"]
    assert group["kind"] == "unicode" and sorted(group["labels"]) == sorted([COMPOSED, DECOMPOSED])
    assert sum(group["records"]) == 30
    assert "'cafe\\u0301'" in plain.out and "'caf\\xe9'" in plain.out and "--normalize_labels nfc" in plain.out

    merged = shardsmith("build", "--manifest", manifest, "--output_dir", tmp_path / "nfc", "--name", "pets",
                        "--normalize_labels", "nfc")
    assert merged.code == 0, merged.err
    meta = json.loads((tmp_path / "nfc" / "metadata.json").read_text())
    assert meta["labels"] == [COMPOSED, "dog", "emu"] and "look_alike_labels" not in meta
    assert meta["splits"]["train"]["label_counts"][COMPOSED] == 24
    assert "warning" not in merged.out

    label_file = tmp_path / "labels.txt"
    label_file.write_text(f"dog\n{DECOMPOSED}\nemu\n", encoding="utf-8")
    listed = shardsmith("build", "--manifest", manifest, "--output_dir", tmp_path / "listed", "--name", "pets",
                        "--normalize_labels", "nfc", "--label_file", label_file)
    assert listed.code == 0, listed.err
    assert json.loads((tmp_path / "listed" / "metadata.json").read_text())["labels"] == ["dog", COMPOSED, "emu"]


def test_class_folders_copied_from_macos_are_one_class_with_nfc(label_sorted_set, shardsmith, tmp_path):
    root = tmp_path / "folders"
    for name, source_label in ((COMPOSED, "cat"), (DECOMPOSED, "dog"), ("emu", "emu")):
        target = root / "train" / name
        target.mkdir(parents=True)
        for split, uri, label in label_sorted_set.rows:
            if label == source_label and split == "train":
                shutil.copyfile(label_sorted_set.path_of(uri), target / uri.rsplit("/", 1)[1])
    for extra, labels in (((), 3), (("--normalize_labels", "nfc"), 2)):
        out = tmp_path / f"out{labels}"
        done = shardsmith("build", "--manifest", root, "--output_dir", out, "--name", "pets", *extra)
        assert done.code == 0, done.err
        meta = json.loads((out / "metadata.json").read_text())
        assert len(meta["labels"]) == labels
        assert ("look_alike_labels" in meta) == (labels == 3)
