"""`shardsmith.load` knows how many batches an epoch holds (metadata.json's counts), so Keras needs no
`steps_per_epoch` and never runs out of data mid-epoch."""

from __future__ import annotations

import logging
import math
import warnings

import pytest

from shardsmith import load


@pytest.mark.parametrize("batch_size, drop_remainder, image_size", [
    (None, False, None), (32, False, 24), (32, True, 24), (32, False, None), (1, False, None)])
def test_the_dataset_knows_its_cardinality(built, metadata_of, batch_size, drop_remainder, image_size):
    records = metadata_of(built)["splits"]["train"]["num_examples"]
    dataset = load(str(built), "train", batch_size=batch_size, drop_remainder=drop_remainder, image_size=image_size)
    expected = records if batch_size is None else (
        records // batch_size if drop_remainder else math.ceil(records / batch_size))
    assert int(dataset.cardinality()) == expected
    assert sum(1 for _ in dataset) == expected


def test_keras_fits_two_epochs_without_running_out_of_data(built, capfd, caplog):
    import keras

    dataset = load(str(built), "train", batch_size=64, image_size=16, dtype="float32")
    labels = len(metadata_of_labels(built))
    model = keras.Sequential([keras.Input((16, 16, 3)), keras.layers.Flatten(), keras.layers.Dense(labels)])
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.INFO):
        warnings.simplefilter("always")
        history = model.fit(dataset, epochs=2, verbose=2)
    assert len(history.history["loss"]) == 2
    said = " ".join(str(w.message) for w in caught) + caplog.text + "".join(capfd.readouterr())
    assert "ran out of data" not in said, said


def metadata_of_labels(out) -> list[str]:
    import json

    return json.loads((out / "metadata.json").read_text())["labels"]
