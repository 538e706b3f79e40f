"""shardsmith/format/indented_json.py writes what `json.dumps(value, indent=2, ensure_ascii=False)` writes, byte
for byte, whatever the value: metadata.json's bytes must not change with the encoder."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from shardsmith.format.indented_json import dumps_indented
from shardsmith.format.metadata_schema import metadata_bytes, parse_metadata

METADATA_LAYOUTS = Path(__file__).parents[2] / "data" / "metadata"
SCALARS = ["", "label", "a \"quoted\"\nline\t\\", "ünïcødé ✓ \u2028 \x00 \ud7ff", 0, -1, 2**70, 1.5, -0.0, 1e300,
           math.inf, -math.inf, math.nan, True, False, None]


def reference(value: object) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def random_value(rng: random.Random, depth: int) -> object:
    kind = rng.randrange(5 if depth < 4 else 1)
    if kind == 0:
        return rng.choice(SCALARS)
    if kind == 1:
        return [random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if kind == 2:
        return tuple(rng.choice(SCALARS) for _ in range(rng.randrange(4)))
    if kind == 3:  # a dict of scalars only, as a shard's label counts
        return {f"n{i:08d}": rng.choice(SCALARS) for i in range(rng.randrange(5))}
    return {rng.choice(["a", "b", "ä", "key \"x\"", ""]) + str(i): random_value(rng, depth + 1)
            for i in range(rng.randrange(4))}


@pytest.mark.parametrize("seed", range(300))
def test_any_json_value_is_written_as_json_dumps_writes_it(seed):
    value = random_value(random.Random(seed), 0)
    assert dumps_indented(value) == reference(value)


@pytest.mark.parametrize("value", [
    *SCALARS, {}, [], (), {"a": {}}, {"a": []}, [[]], [{}], {"a": [1, {"b": ()}]},
    {1: "an int key"}, {"a": {2.5: "a float key", "b": 1}}, {None: 1, True: 2},  # keys json converts
])
def test_edge_values_and_keys_json_converts_are_written_as_json_dumps_writes_them(value):
    assert dumps_indented(value) == reference(value)


@pytest.mark.parametrize("value", [{"a": object()}, [1, {1, 2}], {(1, 2): "a tuple key"}])
def test_what_json_refuses_it_refuses_with_json_dumps_error(value):
    with pytest.raises(TypeError) as expected:
        reference(value)
    with pytest.raises(TypeError) as got:
        dumps_indented(value)
    assert str(got.value) == str(expected.value)


def test_a_value_that_holds_itself_fails_as_json_dumps_fails():
    value: list = [1]
    value.append(value)
    with pytest.raises(ValueError, match="Circular reference"):
        dumps_indented(value)


@pytest.mark.parametrize("path", sorted(METADATA_LAYOUTS.glob("*.json")), ids=lambda p: p.name)
def test_every_metadata_layout_is_written_back_as_the_standard_library_writes_it(path):
    metadata = parse_metadata(path.read_bytes(), str(path))
    assert metadata_bytes(metadata) == (reference(metadata.to_json()) + "\n").encode("utf-8")


def test_a_version_of_many_shards_and_labels_is_written_as_the_standard_library_writes_it():
    labels = [f"n{i:08d}" for i in range(1000)]
    shards = [{"file": f"x-{i:05d}", "num_examples": 10_000, "label_counts": dict.fromkeys(labels, 10)}
              for i in range(20)]
    value = {"name": "imagenet", "labels": labels, "splits": {"train": {"shards": shards, "num_examples": 1}}}
    assert dumps_indented(value) == reference(value)
