"""shardsmith.torch resumed mid-epoch, as a preempted job resumes: a real build, real DataLoader worker processes
and torchdata's StatefulDataLoader, which asks each worker's copy of the dataset for its `state_dict()` and hands
it back to the same worker of a new loader. A job stopped after k batches and resumed in a new dataset and loader
reads the rest of the epoch in the order it would have read it, every record once for every worker count and
rank count; the records skipped are not decoded; a state is refused on another build, naming the version to pass.
"""

from __future__ import annotations

import io
import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchdata")

from torchdata.stateful_dataloader import StatefulDataLoader  # noqa: E402
from torchdata.stateful_dataloader.sampler import StatefulDistributedSampler  # noqa: E402

import shardsmith  # noqa: E402
from pipeline import cli  # noqa: E402
from shardsmith.torch import ShardDataset, StreamingShardDataset  # noqa: E402

KEY = "image/key/sha256"
BUFFER = 8  # the shuffle buffer: small, so a stop after a few batches is well past its filling
BATCH = 4


def _ids(built: Path, split: str = "train") -> Counter:
    return Counter(record[KEY].decode() for record in shardsmith.records(built, split))  # text is str in torch


def _keys(batches) -> list[bytes]:
    return [key for batch in batches for key in batch[KEY]]


def _stop_after(loader, batches: int, keys=lambda batch: batch[KEY]) -> list[bytes]:
    """The keys of the loader's first `batches` batches; the loader is left mid-epoch, as a preempted job."""
    seen = []
    for i, batch in enumerate(loader):
        seen += keys(batch)
        if i + 1 == batches:
            return seen
    raise AssertionError(f"the epoch ended before {batches} batches")


def _dataset_states(state) -> list[dict]:
    """Every dataset state inside a StatefulDataLoader state (one per worker; the loader's own without workers)."""
    if isinstance(state, dict):
        if "yielded" in state and "build_id" in state:
            return [state]
        return [found for value in state.values() for found in _dataset_states(value)]
    return []


def _saved_and_loaded(state: dict) -> dict:
    """`state` through torch.save and torch.load (weights_only, its default), as a checkpoint holds it."""
    saved = io.BytesIO()
    torch.save(state, saved)
    saved.seek(0)
    return torch.load(saved)


def _streaming(built: Path, rank: int, world_size: int, epoch: int, seed: int = 7) -> StreamingShardDataset:
    dataset = StreamingShardDataset(built, "train", features=True, image_size=8, shuffle_buffer=BUFFER, seed=seed,
                                    rank=rank, world_size=world_size)
    dataset.set_epoch(epoch)
    return dataset


@pytest.mark.parametrize("world_size", [1, 2])
@pytest.mark.parametrize("num_workers", [0, 1, 2, 3])
def test_a_job_stopped_mid_epoch_reads_the_rest_in_a_new_loader_every_record_once(built, num_workers, world_size):
    stop_after = 9 if num_workers < 2 else 3 * num_workers  # 36 samples: 3 batches a worker, or 36 of one
    everyone = Counter()
    for rank in range(world_size):
        def loader(dataset):
            return StatefulDataLoader(dataset, batch_size=BATCH, num_workers=num_workers)

        never_stopped = _keys(loader(_streaming(built, rank, world_size, epoch=1)))
        stopped = loader(_streaming(built, rank, world_size, epoch=1))
        before = _stop_after(stopped, stop_after)
        state = stopped.state_dict()
        del stopped  # its workers end: the job was preempted

        workers = _dataset_states(state)
        assert len(workers) == max(num_workers, 1)
        rank_size = len(_streaming(built, rank, world_size, epoch=1))
        per_worker = rank_size // max(num_workers, 1)
        assert all(BUFFER < w["yielded"] < per_worker - BUFFER for w in workers), \
            "every worker stopped past its buffer's filling, with records still to stream"
        assert all(w["epoch"] == 1 and w["rank"] == rank and w["world_size"] == world_size for w in workers)

        resumed_dataset = _streaming(built, rank, world_size, epoch=1)
        resumed = loader(resumed_dataset)
        resumed.load_state_dict(_saved_and_loaded(state))
        after = _keys(resumed)
        assert before + after == never_stopped, "the rest of the epoch, in the order it would have come"
        assert len(before) == BATCH * stop_after and not set(before) & set(after)
        everyone += Counter(before + after)

        resumed_dataset.set_epoch(2)
        assert _keys(resumed) == _keys(loader(_streaming(built, rank, world_size, epoch=2))), \
            "the next epoch starts from its beginning"
    assert everyone == _ids(built), "every rank together: the whole split, each record once"


def test_the_records_skipped_on_resuming_are_not_decoded(built):
    decoded = []

    def counting(image):
        decoded.append(image.size)
        return torch.zeros(1)

    def dataset():
        made = StreamingShardDataset(built, "train", shuffle_buffer=BUFFER, seed=2, image_size=8, transform=counting)
        made.set_epoch(4)
        return made

    stopped = StatefulDataLoader(dataset(), batch_size=BATCH)
    _stop_after(stopped, 10, keys=lambda batch: batch[1].tolist())
    state = stopped.state_dict()
    decoded.clear()
    resumed = StatefulDataLoader(dataset(), batch_size=BATCH)
    resumed.load_state_dict(state)
    labels = [label for _, batch in resumed for label in batch.tolist()]
    assert len(labels) == len(decoded) == 225 - 10 * BATCH, "only the records still to come were decoded"

    unshuffled = StreamingShardDataset(built, "train", shuffle=False, image_size=8, transform=counting)
    unshuffled.load_state_dict({**unshuffled.state_dict(), "yielded": 100})
    decoded.clear()
    assert len(list(unshuffled)) == len(decoded) == 125


def test_the_protocol_without_a_loader_round_trips_and_the_next_epoch_starts_over(built):
    dataset = _streaming(built, 0, 1, epoch=3)
    assert dataset.state_dict()["yielded"] == 0 and dataset.state_dict()["epoch"] == 3
    first = iter(dataset)
    before = [next(first)[KEY] for _ in range(50)]
    state = dataset.state_dict()
    assert state["yielded"] == 50 and state["build_id"] == dataset.build_id and state["num_records"] == 225
    assert json.loads(json.dumps(state)) == state, "plain values: saved as JSON or with torch.save"

    resumed = _streaming(built, 0, 1, epoch=0)  # set_epoch said 0: the state's epoch is the one resumed
    resumed.load_state_dict(state)
    assert resumed.state_dict() == state
    after = [sample[KEY] for sample in resumed]
    assert before + after == [sample[KEY] for sample in _streaming(built, 0, 1, epoch=3)]
    assert resumed.state_dict()["yielded"] == 225
    assert [sample[KEY] for sample in resumed] == [sample[KEY] for sample in _streaming(built, 0, 1, epoch=0)], \
        "the iteration after the resumed one reads set_epoch's epoch from its start"


@pytest.mark.parametrize("shuffle", [True, False])
def test_any_stop_resumes_filling_the_buffer_draining_it_or_at_the_end(built, shuffle):
    def dataset():
        made = StreamingShardDataset(built, "validation", features=True, image_size=8, shuffle=shuffle,
                                     shuffle_buffer=BUFFER, seed=1)
        made.set_epoch(6)
        return made

    whole = [sample[KEY] for sample in dataset()]
    for stop in range(len(whole) + 1):  # 31 records: a stop in every phase of the buffer
        first = dataset()
        iterator = iter(first)
        before = [next(iterator)[KEY] for _ in range(stop)]
        resumed = dataset()
        resumed.load_state_dict(first.state_dict())
        assert before + [sample[KEY] for sample in resumed] == whole, stop


def test_a_state_is_refused_in_another_layout_or_order(built):
    dataset = _streaming(built, 0, 2, epoch=1)
    iterator = iter(dataset)
    next(iterator)
    state = dataset.state_dict()

    other_rank = _streaming(built, 1, 2, epoch=1)
    other_rank.load_state_dict(state)
    with pytest.raises(ValueError, match=r"saved by rank 0 of 2, worker 0 of 1, this is rank 1 of 2") as error:
        iter(other_rank)
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match=r"seed=7 \(this dataset: 8\)"):
        _streaming(built, 0, 2, epoch=1, seed=8).load_state_dict(state)
    with pytest.raises(ValueError, match="split 'train' .225 records., this dataset reads 'validation'"):
        StreamingShardDataset(built, "validation").load_state_dict(state)


@pytest.mark.parametrize("key, value", [
    ("epoch", "1"), ("epoch", -1), ("epoch", 1.5), ("epoch", None), ("epoch", True), ("yielded", "3"),
    ("yielded", True), ("yielded", -2), ("rank", 0.0), ("world_size", 0), ("num_workers", "2"), ("worker", [0]),
    ("num_records", "225"), ("num_records", True), ("build_id", "../../x"), ("build_id", 7), ("split", b"train"),
])
def test_every_field_of_a_state_of_the_wrong_type_or_range_gets_one_clear_line(built, key, value):
    dataset = _streaming(built, 0, 1, epoch=1)
    state = {**dataset.state_dict(), key: value}
    with pytest.raises(ValueError, match=rf"^not a (StreamingShardDataset|shardsmith.torch dataset) state: its "
                                         rf"'{key}'") as error:
        _streaming(built, 0, 1, epoch=1).load_state_dict(state)
    assert "\n" not in str(error.value) and "version=" not in str(error.value)
    if key in ("build_id", "split", "num_records"):
        with pytest.raises(ValueError, match=rf"its '{key}'"):
            ShardDataset(built, "train").load_state_dict(state)


@pytest.fixture(scope="module")
def two_builds(built, label_sorted_set, tmp_path_factory) -> tuple[Path, str]:
    """A copy of `built` rebuilt with --overwrite: (the folder, the id of the build before, still kept)."""
    out = tmp_path_factory.mktemp("rebuilt") / "out"
    shutil.copytree(built, out)
    before = json.loads((out / "metadata.json").read_text())["build_id"]
    code = cli.main(["build", "--manifest", str(label_sorted_set.manifest), "--output_dir", str(out),
                     "--name", "pets", "--num_shards", "train=4,validation=2,test=2", "--overwrite"])
    assert code == 0
    assert json.loads((out / "metadata.json").read_text())["build_id"] != before
    return out, before


def test_a_state_from_another_build_is_refused_with_the_version_that_resumes_it(built, two_builds):
    out, old = two_builds
    dataset = StreamingShardDataset(built, "train", features=True, image_size=8, shuffle_buffer=BUFFER)
    assert dataset.build_id == old
    iterator = iter(dataset)
    before = [next(iterator)[KEY] for _ in range(30)]
    state = dataset.state_dict()

    published = StreamingShardDataset(out, "train", features=True, image_size=8, shuffle_buffer=BUFFER)
    with pytest.raises(ValueError, match=rf"saved reading build {old} .* pass version='{old}' to resume it") as error:
        published.load_state_dict(state)
    assert "\n" not in str(error.value)
    # Through a loader too. In worker processes the same check raises in each worker as it loads its state, and
    # StatefulDataLoader re-raises it from iter(loader); without workers (here) the loader's iterator raises it.
    stopped = StatefulDataLoader(_streaming(built, 0, 1, epoch=0), batch_size=BATCH)
    _stop_after(stopped, 4)
    loader = StatefulDataLoader(_streaming(out, 0, 1, epoch=0), batch_size=BATCH)
    loader.load_state_dict(stopped.state_dict())
    with pytest.raises(ValueError, match=rf"pass version='{old}'"):
        next(iter(loader))

    kept = StreamingShardDataset(out, "train", version=old, features=True, image_size=8, shuffle_buffer=BUFFER)
    kept.load_state_dict(state)
    assert Counter(before + [sample[KEY] for sample in kept]) == _ids(built)

    with pytest.raises(ValueError, match=rf"pass version='{old}'"):
        ShardDataset(out, "train").load_state_dict(ShardDataset(built, "train").state_dict())
    ShardDataset(out, "train", version=old).load_state_dict(ShardDataset(built, "train").state_dict())


def _map_loader(dataset: ShardDataset, **options) -> StatefulDataLoader:
    return StatefulDataLoader(dataset, batch_size=BATCH, num_workers=2, collate_fn=lambda batch: batch, **options)


def _batch_keys(batch: list[dict]) -> list[bytes]:
    return [sample[KEY] for sample in batch]


def _map_keys(batches) -> list[bytes]:
    return [key for batch in batches for key in _batch_keys(batch)]


def test_the_map_style_dataset_resumes_through_the_samplers_state(built):
    def shuffled(dataset):
        return _map_loader(dataset, shuffle=True, generator=torch.Generator().manual_seed(5))

    never_stopped = _map_keys(shuffled(ShardDataset(built, "validation", features=True, image_size=8)))
    stopped = shuffled(ShardDataset(built, "validation", features=True, image_size=8))
    before = _stop_after(stopped, 3, _batch_keys)
    state = stopped.state_dict()
    del stopped
    resumed = _map_loader(ShardDataset(built, "validation", features=True, image_size=8), shuffle=True)
    resumed.load_state_dict(_saved_and_loaded(state))  # RandomSampler's generator and place come back
    after = _map_keys(resumed)
    assert before + after == never_stopped and Counter(before + after) == _ids(built, "validation")
    assert len(before) == 3 * BATCH


def test_the_map_style_dataset_resumes_on_two_ranks_with_a_stateful_distributed_sampler(built):
    everyone = []
    for rank in (0, 1):
        def loader(rank=rank):
            dataset = ShardDataset(built, "validation", features=True, image_size=8)
            sampler = StatefulDistributedSampler(dataset, num_replicas=2, rank=rank, shuffle=True, seed=1)
            sampler.set_epoch(3)  # the epoch is the job's to set again; the sampler's state is its place in it
            return _map_loader(dataset, sampler=sampler)

        never_stopped = _map_keys(loader())
        stopped = loader()
        before = _stop_after(stopped, 2, _batch_keys)
        state = stopped.state_dict()
        del stopped
        resumed = loader()
        resumed.load_state_dict(_saved_and_loaded(state))
        after = _map_keys(resumed)
        assert before + after == never_stopped and len(before) == 2 * BATCH and len(after) == 16 - 2 * BATCH
        everyone += before + after
    assert set(everyone) == set(_ids(built, "validation")) and len(everyone) == 32, "31 records, padded to 2 x 16"
