"""transform_fn/ written without TensorFlow (shardsmith/format/transform_fn.py) is what tensorflow-transform
writes: the same vocabulary file, schema and asset map, and a SavedModel that tft's own TFTransformOutput loads
and that maps every label to the same id (unknown strings to -1). The template it is made from is what
transform_fn_template.py makes from today's tensorflow-transform, and a build imports no TensorFlow."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shardsmith.format import transform_fn
from shardsmith.format.transform_fn import (
    MAX_LABELS,
    TEMPLATE_DIR,
    padded_varint,
    transform_files,
    write_transform_fn,
)
from shardsmith.format.transform_fn_template import TEMPLATE_FILES, make_template

REPO = Path(__file__).resolve().parents[3]
# Not alphabetical (ids are the tuple's order), unicode, spaces, and more labels than a 1-byte varint holds.
LABELS = ("zebra", "Äpfel", "sea lion", "ñu", "ant") + tuple(f"class {i:03d}" for i in range(200))


def _mapped(folder: Path, queries: list[str]) -> tuple[list[int], list[bytes], dict]:
    import tensorflow as tf
    import tensorflow_transform as tft

    output = tft.TFTransformOutput(str(folder))
    layer = output.transform_features_layer()
    ids = layer({"label": tf.constant(queries), "rank_weight": tf.ones([len(queries)])})["label_id"]
    return ids.numpy().tolist(), output.vocabulary_by_name("labels"), output.transformed_feature_spec()


# Both vocabularies from one process: TensorFlow's per-process naming only shows in saved_model.pb, which
# these tests do not compare byte for byte (the template test compares two processes' outputs).
TFT_BOTH = ("import json, os, sys\n"
            "from shardsmith.format.transform_fn_template import tft_transform_fn\n"
            "for folder, labels in json.loads(sys.argv[1]):\n"
            "    tft_transform_fn(tuple(labels), folder)\n"
            "os._exit(0)\n")


@pytest.fixture(scope="module")
def tft_made(tmp_path_factory) -> dict[tuple[str, ...], Path]:
    """tensorflow-transform's own transform_fn for LABELS and for no label at all, made in one fresh process."""
    root = tmp_path_factory.mktemp("tft")
    made = {LABELS: root / "labels", (): root / "empty"}
    subprocess.run([sys.executable, "-c", TFT_BOTH, json.dumps([(str(f), list(k)) for k, f in made.items()])],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    return made


def test_a_written_transform_fn_maps_labels_exactly_as_tensorflow_transforms_own(tmp_path, tft_made):
    ours, theirs = tmp_path / "ours", tft_made[LABELS]
    ours.mkdir()
    write_transform_fn(LABELS, str(ours))
    for relative in ("transform_fn/assets/labels", "transformed_metadata/schema.pbtxt",
                     "transformed_metadata/asset_map"):
        assert (ours / relative).read_bytes() == (theirs / relative).read_bytes(), relative
    queries = [*LABELS, "not a label", "", "zebra "]
    ours_mapped, theirs_mapped = _mapped(ours, queries), _mapped(theirs, queries)
    assert ours_mapped == theirs_mapped
    assert ours_mapped[0] == [*range(len(LABELS)), -1, -1, -1]


def test_an_empty_vocabulary_is_written_as_tensorflow_transform_writes_one(tmp_path, tft_made):
    ours, theirs = tmp_path / "ours", tft_made[()]
    ours.mkdir()
    write_transform_fn((), str(ours))
    schema = "transformed_metadata/schema.pbtxt"
    assert (ours / schema).read_bytes() == (theirs / schema).read_bytes()
    assert len((ours / "transform_fn/assets/labels").read_text().splitlines()) == \
        len((theirs / "transform_fn/assets/labels").read_text().splitlines()) == 1  # tft's is a random UUID
    assert _mapped(ours, ["cat", ""])[0] == _mapped(theirs, ["cat", ""])[0] == [-1, -1]


def test_two_vocabularies_loaded_in_one_process_keep_their_own_tables(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    write_transform_fn(("cat", "dog"), str(first))
    write_transform_fn(("dog", "cat", "emu"), str(second))
    assert _mapped(first, ["cat", "dog", "emu"])[0] == [0, 1, -1]
    assert _mapped(second, ["cat", "dog", "emu"])[0] == [1, 0, 2]


def test_the_same_labels_give_the_same_bytes_and_other_labels_other_bytes():
    assert transform_files(LABELS) == transform_files(LABELS)
    assert transform_files(("a", "b"))["transform_fn/saved_model.pb"] != \
        transform_files(("a", "c"))["transform_fn/saved_model.pb"]


def test_the_committed_template_is_what_todays_tensorflow_transform_makes(tmp_path):
    make_template(str(tmp_path / "template"))
    for relative in TEMPLATE_FILES:
        assert (tmp_path / "template" / relative).read_bytes() == (Path(TEMPLATE_DIR) / relative).read_bytes(), (
            f"{relative} differs: run `python -m shardsmith.format.transform_fn_template` and commit the files")


def test_padded_varints_and_vocabulary_limits():
    assert padded_varint(3) == b"\x83\x80\x80\x00"
    assert padded_varint(300) == b"\xac\x82\x80\x00"
    with pytest.raises(ValueError):
        padded_varint(MAX_LABELS + 1)
    with pytest.raises(ValueError, match="1 to"):
        transform_fn.saved_model_bytes(())
    with pytest.raises(ValueError, match="line break"):
        transform_fn.vocabulary_bytes(("a\nb",))


def test_a_local_build_imports_no_tensorflow(tmp_path, image_set_factory):
    """Every process of the build (launcher, writers, anything it starts) finds a `tensorflow` that refuses to
    be imported; the build still publishes a transform_fn that maps its labels."""
    images = image_set_factory(tmp_path / "data", {"cat": {"train": 4, "test": 1}, "dog": {"train": 4, "test": 1}})
    blocked = tmp_path / "no_tensorflow"
    for package in ("tensorflow", "tensorflow_transform"):
        (blocked / package).mkdir(parents=True)
        (blocked / package / "__init__.py").write_text(f"raise ImportError('a build imported {package}')\n")
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", "build", "--manifest", str(images.manifest), "--output_dir", str(out),
         "--name", "pets", "--writer_processes", "2"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": f"{blocked}{os.pathsep}{REPO}"})
    assert done.returncode == 0, done.stderr[-3000:]
    (published,) = out.glob("builds/*/transform_fn")
    assert _mapped(published.parent, ["cat", "dog", "emu"])[0] == [0, 1, -1]
