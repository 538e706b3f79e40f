"""shardsmith/core/shared_shard.py and the writer pool's shared shards, on real image files: a shard written by two
writers (the head into the temporary file, the tail prepared and appended) is byte for byte the shard one writer
writes, with its index file, row list and result; a file changed between the two parts is not renamed; a tail
writer that dies leaves the shard written whole; and the last shard of a build with writer processes is shared."""

from __future__ import annotations

import hashlib
import io
import random
from pathlib import Path

import pytest
from PIL import Image

from shardsmith.core import shared_shard
from shardsmith.core.fault_injection import FAULT_ENV, WRITER_KILLED
from shardsmith.core.rows import ManifestRow, PlacedRow, ShardResult
from shardsmith.core.settings import RecordSettings
from shardsmith.core.shard_file import WriterConfig, write_shard_file
from shardsmith.core.shard_worker import ShardWriterPool
from shardsmith.core.shared_shard import SharedShardError, can_share, cut, finish_shared, prepare_tail, write_head
from shardsmith.format.naming import TEMP_PREFIX
from transforms.write_shards import WriteShardFn

LABELS = {"cat": 0, "dog": 1}


def _jpeg(seed: int) -> bytes:
    rng = random.Random(seed)
    image = Image.frombytes("RGB", (24, 16), rng.randbytes(24 * 16 * 3))
    out = io.BytesIO()
    image.save(out, "JPEG", quality=90)
    return out.getvalue()


def _rows(root: Path, count: int, shard: int = 0, num_shards: int = 1) -> list[PlacedRow]:
    """`count` placed rows of real JPEGs in `root`/img, listed out of record order."""
    rows = []
    for i in range(count):
        path = root / "img" / f"{shard}-{i}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(_jpeg(i + 1000 * shard))
        label = "cat" if i % 3 else "dog"
        row = ManifestRow(str(root / "m.csv"), 0, i + 2, f"img/{path.name}", str(path), "train", label,
                          path.stat().st_size, LABELS[label])
        rows.append(PlacedRow(row, shard, num_shards, ((i * 7919) % 101, 0, i + 2)))
    return rows


def _damage(truncated: list[PlacedRow], removed: list[PlacedRow]) -> None:
    """Cuts the files of `truncated` short (their header says more than they hold) and removes `removed`'s."""
    for placed in truncated:
        path = Path(placed.row.resolved_uri)
        path.write_bytes(path.read_bytes()[:40])
    for placed in removed:
        Path(placed.row.resolved_uri).unlink()


def _config(out: Path, **settings) -> WriterConfig:
    out.mkdir(parents=True, exist_ok=True)
    return WriterConfig(str(out), "x", RecordSettings(validate="header", **settings), list_rows=True)


def _files(folder: Path) -> dict[str, str]:
    """Every file under `folder` (the shards, their index files, the row lists' folder), by relative path."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in folder.rglob("*") if p.is_file()}


def _shared(config: WriterConfig, rows: list[PlacedRow]):
    head, tail = cut([rows])
    return finish_shared(config, "train", 0, 1, write_head(config, "train", head),
                         prepare_tail(config, "train", tail))


@pytest.mark.parametrize("rejected", ["none", "in both parts", "the whole head"])
def test_a_shared_shard_is_byte_for_byte_the_shard_one_writer_writes(tmp_path, rejected):
    rows = _rows(tmp_path, 80)
    head, tail = cut([rows])
    if rejected == "in both parts":
        _damage([head[1], tail[7]], [head[5], tail[2]])
    elif rejected == "the whole head":
        _damage(head[::2], head[1::2])
    whole = write_shard_file(_config(tmp_path / "whole"), "train", 0, [rows])
    shared = _shared(_config(tmp_path / "shared"), rows)
    assert shared.result == whole.result
    assert (shared.errors, shared.digests, shared.image_sizes) == (whole.errors, whole.digests, whole.image_sizes)
    assert len(shared.errors) == {"none": 0, "in both parts": 4, "the whole head": 40}[rejected]
    assert _files(tmp_path / "shared") == _files(tmp_path / "whole")
    assert {name.rsplit(".", 1)[-1] for name in _files(tmp_path / "whole")} >= {"idx", "jsonl"}
    assert not [name for name in _files(tmp_path / "shared") if TEMP_PREFIX in name]


@pytest.mark.parametrize("change", [b"", b"x" * 10])
def test_the_tail_is_not_appended_to_a_file_changed_since_the_head_wrote_it(tmp_path, change):
    config = _config(tmp_path / "out")
    head_rows, tail_rows = cut([_rows(tmp_path, 70)])
    head = write_head(config, "train", head_rows)
    tail = prepare_tail(config, "train", tail_rows)
    temp = Path(head.temp_path)
    data = temp.read_bytes()
    temp.write_bytes(data[:-10] if not change else data + change)
    with pytest.raises(SharedShardError, match="where the head writer wrote"):
        finish_shared(config, "train", 0, 1, head, tail)
    assert not [name for name in _files(tmp_path / "out") if name.startswith("x-") or TEMP_PREFIX in name], \
        "nothing renamed, the temporary file removed"


def test_only_a_local_uncompressed_shard_of_enough_rows_is_shared(tmp_path, monkeypatch):
    rows = _rows(tmp_path, shared_shard.MIN_ROWS_TO_SHARE)
    head, tail = cut([rows])
    assert can_share(_config(tmp_path / "a"), head, tail)
    assert not can_share(_config(tmp_path / "b", compression="gzip"), head, tail)
    assert not can_share(WriterConfig("gs://bucket/out", "x"), head, tail)
    assert not can_share(_config(tmp_path / "c"), *cut([rows[1:]]))
    monkeypatch.setattr(shared_shard, "MAX_SHARED_TAIL_BYTES", sum(p.row.size for p in tail) - 1)
    assert not can_share(_config(tmp_path / "d"), head, tail), "the tail writer would hold too many bytes"


def test_two_writer_processes_write_a_shared_shard_as_one_writes_it(tmp_path):
    rows = _rows(tmp_path, 90)
    head, tail = cut([rows])
    _damage([head[3]], [tail[9]])
    whole = write_shard_file(_config(tmp_path / "whole"), "train", 0, [rows])
    pool = ShardWriterPool(2)
    try:
        shared = pool.submit_shared(_config(tmp_path / "shared"), "train", 0, 1, *cut([rows])).result(timeout=120)
    finally:
        pool.close()
    assert shared.result == whole.result and shared.errors == whole.errors and shared.digests == whole.digests
    assert _files(tmp_path / "shared") == _files(tmp_path / "whole")


def test_when_the_writers_die_mid_part_the_shard_is_still_written_once_and_whole(tmp_path, monkeypatch, caplog):
    """Both first writers are killed 5 records into their part: the head is written again by a new writer, the
    tail's death makes the pool write the shard whole; the shard is the one a single writer writes."""
    rows = _rows(tmp_path, 80)
    whole = write_shard_file(_config(tmp_path / "whole"), "train", 0, [rows])
    monkeypatch.setenv(FAULT_ENV, f"{WRITER_KILLED}:5")
    pool = ShardWriterPool(2)
    monkeypatch.delenv(FAULT_ENV)
    try:
        shared = pool.submit_shared(_config(tmp_path / "shared"), "train", 0, 1, *cut([rows])).result(timeout=120)
    finally:
        pool.close()
    assert shared.result == whole.result and shared.digests == whole.digests
    assert "died before it finished the first part" in caplog.text
    assert "died before it finished the second part of train shard 1 of 1" in caplog.text
    written = _files(tmp_path / "shared")
    assert {name: written[name] for name in _files(tmp_path / "whole")} == _files(tmp_path / "whole")


def test_the_last_shards_handed_to_writer_processes_are_shared(tmp_path, monkeypatch):
    shards = [_rows(tmp_path, count, shard=shard, num_shards=3) for shard, count in enumerate([30, 40, 20])]
    shared_calls = []
    submit_shared = ShardWriterPool.submit_shared

    def noted(pool, config, split, shard, *args):
        shared_calls.append(shard)
        return submit_shared(pool, config, split, shard, *args)

    monkeypatch.setattr(ShardWriterPool, "submit_shared", noted)
    monkeypatch.setattr(shared_shard, "MIN_ROWS_TO_SHARE", 2)
    fn = WriteShardFn(_config(tmp_path / "pool"), processes=2)
    fn.setup()
    try:
        outputs = [o for shard, rows in enumerate(shards) for o in fn.process((("train", shard), [rows]))]
        outputs += fn.finish_bundle()
    finally:
        fn.teardown()
    results = sorted((r for r in (getattr(o, "value", o) for o in outputs) if isinstance(r, ShardResult)),
                     key=lambda r: r.shard)
    assert shared_calls == [0, 2], "the two smallest shards, one per writer process, handed out last"
    for rows in shards:
        write_shard_file(_config(tmp_path / "one"), "train", rows[0].shard, [rows])
    assert _files(tmp_path / "pool") == _files(tmp_path / "one")
    assert [r.num_examples for r in results] == [30, 40, 20]
