"""load()'s iterator is resumable mid-epoch with tf.train.Checkpoint: a job stopped after any batch and restarted
in a new process-like state (a new dataset, a new iterator, the checkpoint restored) reads the rest of the epoch,
each record of it exactly once, with the default shuffles on, with a seed, and with the decode at reduced scale."""

from __future__ import annotations

from collections import Counter

import pytest

import shardsmith

KEY = "image/key/sha256"


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
