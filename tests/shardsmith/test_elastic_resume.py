"""Elastic resume (issue 56 item 2): `ShardDataset` with `ElasticSampler`, stopped mid-epoch on W DataLoader workers
and R ranks and resumed on W' and R', reads the rest of the epoch, each record once over every rank, in the order
the seed and epoch give whatever the shape. Real build, real worker processes, torchdata's StatefulDataLoader: the
same shape restores the loader's own state; another one takes the sampler's state out of it (`elastic_state`)."""

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
from shardsmith.elastic import epoch_order  # noqa: E402
from shardsmith.torch import ElasticSampler, ShardDataset, elastic_state  # noqa: E402

KEY = "image/key/sha256"
BATCH = 4
SEED, EPOCH = 5, 3


def _keys_by_index(built: Path) -> list[str]:
    return [record[KEY].decode() for record in shardsmith.records(built, "train")]  # text is str in torch


def _saved_and_loaded(state: dict) -> dict:
    """`state` through torch.save and torch.load (weights_only), as a checkpoint holds it."""
    saved = io.BytesIO()
    torch.save(state, saved)
    saved.seek(0)
    return torch.load(saved)


def _loader(built: Path, rank: int, world_size: int, num_workers: int, state: dict | None = None):
    dataset = ShardDataset(built, "train", features=True, image_size=8)
    sampler = ElasticSampler(dataset, seed=SEED, rank=rank, world_size=world_size)
    sampler.set_epoch(EPOCH)
    if state is not None:
        sampler.load_state_dict(elastic_state(state))
    return StatefulDataLoader(dataset, sampler=sampler, batch_size=BATCH, num_workers=num_workers)


@pytest.mark.parametrize("before, after", [((2, 1), (1, 1)), ((1, 1), (3, 1)), ((0, 2), (2, 3)), ((3, 3), (0, 1)),
                                           ((2, 2), (2, 2))])
def test_a_job_stopped_on_one_shape_resumes_on_another_reading_each_record_once_in_the_seeds_order(
        built, before, after):
    (workers, ranks), (new_workers, new_ranks) = before, after
    keys = _keys_by_index(built)
    order = [keys[i] for i in epoch_order(len(keys), SEED, EPOCH)]  # the epoch, whatever the shape
    steps = 3
    read, states = [], []
    for rank in range(ranks):  # every rank steps together: `steps` batches each
        loader = _loader(built, rank, ranks, workers)
        batches = iter(loader)
        read.append([key for _ in range(steps) for key in next(batches)[KEY]])
        states.append(_saved_and_loaded(loader.state_dict()))
        del batches, loader  # preempted
    consumed = {elastic_state(state)["consumed"] for state in states}
    assert consumed == {steps * BATCH * ranks}, "every rank's state says the same: the positions read by all"
    for rank, keys_read in enumerate(read):
        assert keys_read == order[rank:steps * BATCH * ranks:ranks]

    rest = order[steps * BATCH * ranks:]
    resumed = []
    for rank in range(new_ranks):  # each new rank loads one saved state: any rank's is the same
        state = states[rank % ranks]
        if (new_workers, new_ranks) == (workers, ranks):
            loader = _loader(built, rank, new_ranks, new_workers)
            loader.load_state_dict(state)  # the same shape: the loader's own state, as saved
        else:
            loader = _loader(built, rank, new_ranks, new_workers, state)
        keys_read = [key for batch in loader for key in batch[KEY]]
        assert keys_read == rest[rank::new_ranks], "the rest of the epoch, dealt over the new ranks in order"
        resumed += keys_read
    assert Counter(key for part in read for key in part) + Counter(resumed) == Counter(keys), \
        "every record of the split once over every rank, before and after"


def test_the_order_depends_on_the_seed_and_epoch_and_the_next_epoch_starts_over(built):
    n = len(_keys_by_index(built))
    assert list(epoch_order(n, SEED, EPOCH)) == list(epoch_order(n, SEED, EPOCH))
    assert list(epoch_order(n, SEED, EPOCH)) != list(epoch_order(n, SEED, EPOCH + 1))
    assert sorted(epoch_order(n, SEED, EPOCH)) == list(range(n))
    assert list(epoch_order(n, SEED, EPOCH, shuffle=False)) == list(range(n))
    dataset = ShardDataset(built, "train")
    sampler = ElasticSampler(dataset, seed=SEED, rank=1, world_size=2)
    sampler.set_epoch(EPOCH)
    first = iter(sampler)
    taken = [next(first) for _ in range(5)]
    state = sampler.state_dict()
    assert state["consumed"] == 10 and state["epoch"] == EPOCH
    resumed = ElasticSampler(dataset, seed=SEED, rank=0, world_size=1)
    resumed.load_state_dict(state)
    assert len(resumed) == n - 10
    assert list(resumed) == [int(i) for i in epoch_order(n, SEED, EPOCH)[10:]]
    resumed.set_epoch(EPOCH + 1)
    assert len(resumed) == n and list(resumed) == [int(i) for i in epoch_order(n, SEED, EPOCH + 1)]
    assert taken == [int(i) for i in epoch_order(n, SEED, EPOCH)[1:10:2]]


@pytest.mark.parametrize("change, message", [
    (dict(seed=6), "the state was saved with seed 5 (this sampler: 6)"),
    (dict(shuffle=False), "shuffle True (this sampler: False)"),
])
def test_a_state_of_other_settings_or_another_build_is_refused_in_one_line(built, tmp_path, change, message):
    dataset = ShardDataset(built, "train")
    sampler = ElasticSampler(dataset, seed=SEED)
    next(iter(sampler))
    state = sampler.state_dict()
    other = ElasticSampler(dataset, **{"seed": SEED, **change})
    with pytest.raises(ValueError, match=re.escape(message)) as refused:
        other.load_state_dict(state)
    assert "\n" not in str(refused.value)
    for bad, said in (({**state, "consumed": -1}, "its 'consumed' is -1"), ({**state, "epoch": True}, "'epoch'"),
                      ({"yielded": 3}, "not an ElasticSampler state"),
                      ({**state, "build_id": "20200101T000000Z-00000000"},
                       "saved reading build 20200101T000000Z-00000000 .* it cannot be resumed")):
        with pytest.raises(ValueError, match=said):
            ElasticSampler(dataset, seed=SEED).load_state_dict(bad)
    with pytest.raises(ValueError, match="no ElasticSampler or StreamingShardDataset.batch_size=.... state in it"):
        elastic_state({"_snapshot": {"x": 1}})
