"""Elastic resume of the streaming reader (issue 56 item 2): `StreamingShardDataset(batch_size=B)` stopped mid-epoch
on W DataLoader workers and R ranks and resumed on W' and R' reads the rest of the epoch, each record once over
every rank, in the order the seed and epoch give whatever the shape. Real build, real worker processes,
torchdata's StatefulDataLoader; the shape-free state comes out of the loader's saved state (`elastic_state`)."""

from __future__ import annotations

import io
import re
from collections import Counter
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchdata")

from torchdata.stateful_dataloader import StatefulDataLoader  # noqa: E402

import shardsmith  # noqa: E402
from shardsmith.torch import StreamingShardDataset, elastic_state  # noqa: E402

KEY = "image/key/sha256"
BATCH = 4
SEED, EPOCH = 5, 3


def _dataset(built: Path, rank: int = 0, world_size: int = 1, *, epoch: int = EPOCH, seed: int = SEED,
             batch_size: int = BATCH) -> StreamingShardDataset:
    dataset = StreamingShardDataset(built, "train", features=True, image_size=8, seed=seed, rank=rank,
                                    world_size=world_size, batch_size=batch_size)
    dataset.set_epoch(epoch)
    return dataset


def _saved_and_loaded(state: dict) -> dict:
    """`state` through torch.save and torch.load (weights_only), as a checkpoint holds it."""
    saved = io.BytesIO()
    torch.save(state, saved)
    saved.seek(0)
    return torch.load(saved)


def _epoch_in_batches(built: Path, **settings) -> list[list[bytes]]:
    """The epoch's global batches in order, as one worker of one rank reads them."""
    loader = StatefulDataLoader(_dataset(built, **settings), batch_size=BATCH)
    return [list(batch[KEY]) for batch in loader]


def test_the_order_is_the_same_on_any_number_of_workers_and_changes_with_the_seed_and_epoch(built):
    reference = _epoch_in_batches(built)
    assert Counter(key for batch in reference for key in batch) == Counter(
        record[KEY].decode() for record in shardsmith.records(built, "train")), "the whole split, each record once"
    for workers in (2, 3):
        loader = StatefulDataLoader(_dataset(built), batch_size=BATCH, num_workers=workers)
        assert [list(batch[KEY]) for batch in loader] == reference, f"{workers} workers: the same batches in order"
    assert _epoch_in_batches(built, epoch=EPOCH + 1) != reference
    assert _epoch_in_batches(built, seed=SEED + 1) != reference
    assert [len(batch) for batch in reference] == [BATCH] * 56 + [1], "225 records: 56 full batches and one"


@pytest.mark.parametrize("before, after", [((2, 1), (1, 1)), ((1, 1), (3, 1)), ((0, 2), (2, 3)), ((3, 3), (0, 1)),
                                           ((2, 2), (1, 2))])
def test_a_job_stopped_on_one_shape_resumes_on_another_reading_each_record_once_in_the_seeds_order(
        built, before, after):
    (workers, ranks), (new_workers, new_ranks) = before, after
    reference = _epoch_in_batches(built)
    steps = 3
    read, states = [], []
    for rank in range(ranks):  # every rank steps together: `steps` batches each
        loader = StatefulDataLoader(_dataset(built, rank, ranks), batch_size=BATCH, num_workers=workers)
        batches = iter(loader)
        taken = [list(next(batches)[KEY]) for _ in range(steps)]
        assert taken == reference[rank:steps * ranks:ranks], "rank r steps through global batches r, r + R, ..."
        read += [key for batch in taken for key in batch]
        states.append(_saved_and_loaded(loader.state_dict()))
        del batches, loader  # preempted
    shape_free = [elastic_state(state) for state in states]
    assert {state["consumed"] for state in shape_free} == {steps * BATCH * ranks}, \
        "every rank's state says the same: the records read by all"

    rest = reference[steps * ranks:]
    resumed = []
    for rank in range(new_ranks):  # each new rank loads one saved state: any rank's is the same
        dataset = _dataset(built, rank, new_ranks)
        dataset.load_state_dict(shape_free[rank % ranks])
        batches = [list(batch[KEY]) for batch in
                   StatefulDataLoader(dataset, batch_size=BATCH, num_workers=new_workers)]
        assert batches == rest[rank::new_ranks], "the rest of the epoch, dealt over the new ranks in order"
        resumed += [key for batch in batches for key in batch]
    assert Counter(read) + Counter(resumed) == Counter(key for batch in reference for key in batch), \
        "every record of the split once over every rank, before and after"


def test_a_resumed_job_stopped_again_resumes_on_a_third_shape(built):
    reference = _epoch_in_batches(built)
    first = StatefulDataLoader(_dataset(built), batch_size=BATCH, num_workers=2)
    batches = iter(first)
    read = [list(next(batches)[KEY]) for _ in range(5)]
    state = elastic_state(first.state_dict())
    second_ranks = []
    for rank in range(2):
        dataset = _dataset(built, rank, 2)
        dataset.load_state_dict(state)
        loader = StatefulDataLoader(dataset, batch_size=BATCH, num_workers=3, snapshot_every_n_steps=2)
        batches = iter(loader)
        read += [list(next(batches)[KEY]) for _ in range(7)]  # a snapshot 1 step stale: the loader counts it
        second_ranks.append(elastic_state(loader.state_dict()))
        del batches, loader
    assert {state["consumed"] for state in second_ranks} == {(5 + 7 * 2) * BATCH}
    third = _dataset(built)
    third.load_state_dict(second_ranks[1])
    read += [list(batch[KEY]) for batch in StatefulDataLoader(third, batch_size=BATCH, num_workers=1)]
    assert sorted(read) == sorted(reference) and len(read) == len(reference), "each batch once over three shapes"


def test_the_same_shape_restores_the_loaders_own_state(built):
    reference = _epoch_in_batches(built, epoch=1)
    stopped = StatefulDataLoader(_dataset(built, epoch=1), batch_size=BATCH, num_workers=2)
    batches = iter(stopped)
    before = [list(next(batches)[KEY]) for _ in range(9)]
    state = _saved_and_loaded(stopped.state_dict())
    del batches, stopped
    resumed = StatefulDataLoader(_dataset(built, epoch=1), batch_size=BATCH, num_workers=2)
    resumed.load_state_dict(state)
    assert before + [list(batch[KEY]) for batch in resumed] == reference


def test_a_loader_of_another_batch_size_or_a_state_taken_inside_a_batch_is_refused_in_one_line(built):
    loader = StatefulDataLoader(_dataset(built), batch_size=2 * BATCH, num_workers=2)
    batches = iter(loader)
    for _ in range(3):
        next(batches)
    with pytest.raises(ValueError, match=re.escape("the DataLoader's batch_size must be the dataset's (4)")) as error:
        elastic_state(loader.state_dict())
    assert "\n" not in str(error.value)
    del batches, loader

    dataset = _dataset(built)
    samples = iter(dataset)
    for _ in range(BATCH + 1):
        next(samples)
    with pytest.raises(ValueError, match="inside a batch of 4: take it between batches"):
        elastic_state(dataset.state_dict())
    next(samples), next(samples), next(samples)
    state = elastic_state(dataset.state_dict())
    assert state["consumed"] == 2 * BATCH


def test_an_elastic_state_of_other_settings_is_refused_and_a_run_state_points_to_batch_size(built):
    dataset = _dataset(built)
    samples = iter(dataset)
    for _ in range(BATCH):
        next(samples)
    state = elastic_state(dataset.state_dict())
    for other, said in ((_dataset(built, seed=SEED + 1), "seed=5 (this dataset: 6)"),
                        (_dataset(built, batch_size=BATCH + 1), "batch_size=4 (this dataset: 5)")):
        with pytest.raises(ValueError, match=re.escape(said)):
            other.load_state_dict(state)
    with pytest.raises(ValueError, match="not a whole number of batches of 4"):
        _dataset(built).load_state_dict({**state, "consumed": 5})

    runs = StreamingShardDataset(built, "train", rank=0, world_size=2)
    next(iter(runs))
    other_rank = StreamingShardDataset(built, "train", rank=1, world_size=2)
    other_rank.load_state_dict(runs.state_dict())
    with pytest.raises(ValueError, match=r"made with batch_size= \(the DataLoader's\) resumes on any shape"):
        iter(other_rank)
