"""load()'s iterator is resumable mid-epoch with tf.train.Checkpoint: a job stopped after any batch and restarted
in a new process-like state (a new dataset, a new iterator, the checkpoint restored) reads the rest of the epoch,
each record of it exactly once, with the default shuffles on, with a seed, and with the decode at reduced scale."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

import shardsmith

KEY = "image/key/sha256"


def shardsmith_metadata(out: Path) -> dict:
    return json.loads((out / "metadata.json").read_text())


def _keys(batch) -> list[bytes]:
    return [key for key in batch[KEY].numpy()]


@pytest.mark.parametrize("stop_after", [1, 5, 13])
@pytest.mark.parametrize("seed", [None, 7])
def test_a_job_stopped_after_any_batch_resumes_each_record_once(tf, built, tmp_path, stop_after, seed):
    def dataset():
        return shardsmith.load(str(built), "train", batch_size=16, image_size=16, features=True, seed=seed,
                               shuffle_buffer=64)

    expected = Counter(record[KEY] for record in shardsmith.records(built, "train"))
    iterator = iter(dataset())
    before = [key for _ in range(stop_after) for key in _keys(next(iterator))]
    saved = tf.train.Checkpoint(iterator=iterator).save(str(tmp_path / "step"))
    del iterator  # the job is gone

    resumed = iter(dataset())
    tf.train.Checkpoint(iterator=resumed).restore(saved).assert_consumed()
    after = [key for batch in resumed for key in _keys(batch)]
    assert Counter(before) + Counter(after) == expected
    assert len(before) == 16 * stop_after


def test_a_seeded_epoch_resumed_is_the_epoch_that_was_not_stopped(tf, built, tmp_path):
    def dataset():
        return shardsmith.load(str(built), "train", batch_size=16, image_size=16, features=True, seed=3)

    whole = [key for batch in dataset() for key in _keys(batch)]
    iterator = iter(dataset())
    before = [key for _ in range(4) for key in _keys(next(iterator))]
    saved = tf.train.Checkpoint(iterator=iterator).save(str(tmp_path / "step"))
    resumed = iter(dataset())
    tf.train.Checkpoint(iterator=resumed).restore(saved)
    assert before + [key for batch in resumed for key in _keys(batch)] == whole


def _night(cli_run, csv_manifest, out, name, rows):
    done = cli_run("build", "--manifest", csv_manifest(name, rows), "--output_dir", out, "--name", "pets",
                      "--incremental", "--num_shards", "train=2,validation=1,test=1")
    assert done.code == 0, done.err


def _other_label(rows, index):
    """`rows` with row `index`'s label swapped for another of the set's labels: a version of the same counts."""
    labels = sorted({label for _, _, label in rows})
    split, uri, label = rows[index]
    return rows[:index] + [(split, uri, labels[(labels.index(label) + 1) % len(labels)])] + rows[index + 1:]


@pytest.mark.parametrize("change", ["another record count", "the same record count"])
def test_a_checkpoint_restored_after_a_new_version_is_refused_naming_the_version_that_resumes_it(
        tf, version_rows, csv_manifest, tmp_path, change, request):
    """Restored into a load() of a newer version, a checkpoint's positions would name other records: the first
    element the restored pipeline makes is refused (the build and split it read are in the iterator's state), in a
    line naming the version= that resumes it. Elements the checkpoint already held (tf.data's buffers) come first,
    and are the saved version's. With that version= it reads the rest of its epoch, each record once."""
    cli_run = request.getfixturevalue("shardsmith")  # the CLI fixture; `shardsmith` here is the package
    out = tmp_path / "out"
    rows = version_rows(12)
    _night(cli_run, csv_manifest, out, "a", rows)
    saved_build = shardsmith_metadata(out)["build_id"]

    def dataset(**version):
        return shardsmith.load(str(out), "train", batch_size=4, image_size=8, shuffle_buffer=8, features=True,
                               **version)

    saved_records = {(r[KEY], r["image/class/text"]) for r in shardsmith.records(out, "train")}
    iterator = iter(dataset())
    before = [key for _ in range(2) for key in _keys(next(iterator))]
    saved = tf.train.Checkpoint(iterator=iterator).save(str(tmp_path / "step"))
    first_train = next(i for i, row in enumerate(rows) if row[0] == "train")
    tonight = rows[1:] if change == "another record count" else _other_label(rows, first_train)
    _night(cli_run, csv_manifest, out, "b", tonight)
    new_build = shardsmith_metadata(out)["build_id"]
    assert new_build != saved_build
    if change == "the same record count":
        assert int(dataset().cardinality()) == int(dataset(version=saved_build).cardinality())

    resumed = iter(dataset())
    tf.train.Checkpoint(iterator=resumed).restore(saved)
    held = []
    with pytest.raises(tf.errors.InvalidArgumentError) as refused:
        for batch in resumed:
            held += zip(_keys(batch), batch["image/class/text"].numpy(), strict=True)
    line = refused.value.message.split("\n")[0]
    assert (f"the checkpoint was saved reading train of build {saved_build} of {out}, this dataset reads train of "
            f"build {new_build}: resume it with load(..., version={saved_build}) and that split") in line
    assert set(held) <= saved_records and not set(before) & {key for key, _ in held}

    resumed = iter(dataset(version=saved_build))
    tf.train.Checkpoint(iterator=resumed).restore(saved)
    after = [key for batch in resumed for key in _keys(batch)]
    assert Counter(before) + Counter(after) == Counter(key for key, _ in saved_records)


def test_a_checkpoint_of_one_split_is_refused_by_another(tf, built, tmp_path):
    iterator = iter(shardsmith.load(str(built), "train", batch_size=4, image_size=8))
    next(iterator)
    saved = tf.train.Checkpoint(iterator=iterator).save(str(tmp_path / "step"))
    resumed = iter(shardsmith.load(str(built), "validation", batch_size=4, image_size=8))
    tf.train.Checkpoint(iterator=resumed).restore(saved)
    with pytest.raises(tf.errors.InvalidArgumentError, match="saved reading train of build .* this dataset reads "
                                                              "validation of build"):
        for _ in resumed:
            pass
