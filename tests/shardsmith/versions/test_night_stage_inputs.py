"""What a night's carry-over stages are given: the published version without what only the new version's
metadata reads (shardsmith/versions/carry_over.py `CarriedVersion.for_stages`), so that pickling it into each
stage costs little however many labels the version has."""

from __future__ import annotations

import pickle
from dataclasses import replace
from pathlib import Path

import pytest

from shardsmith.format.metadata_schema import parse_metadata
from shardsmith.format.naming import METADATA_FILE
from shardsmith.output_folder.layout import new_build_id
from shardsmith.output_folder.target import BuildTarget
from shardsmith.shard_writer.writer_config import WriterConfig
from shardsmith.versions.carry_over import CarriedShard, CarriedVersion
from transforms.versions.carried_rows import PublishedCopies, SplitCarriedRows
from transforms.versions.rewritten_shards import RewriteShards

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def published(shardsmith, version_rows, out: Path) -> CarriedVersion:
    """A real published version (a build of 90 rows) as a night's launcher sees it."""
    manifest = out.parent / "m.csv"
    manifest.write_text("".join(f"{s},{u},{label}\n" for s, u, label in version_rows()))
    done = shardsmith("build", "--manifest", manifest, "--output_dir", out, "--name", "pets", "--incremental",
                      "--num_shards", "train=2,validation=1,test=1")
    assert done.code == 0, done.err + done.out
    meta = parse_metadata((out / METADATA_FILE).read_bytes())
    shards = tuple(CarriedShard(split, shard.build or meta.build_id, shard) for split, shard in meta.all_shards())
    return CarriedVersion(meta.build_id, 2, tuple(meta.labels), shards, num_rows=meta.num_examples,
                          num_records=meta.num_examples)


def test_the_stages_version_is_the_version_without_its_shards_label_counts(shardsmith, version_rows, tmp_path):
    version = published(shardsmith, version_rows, tmp_path / "out")
    assert all(shard.entry.label_counts for shard in version.shards)
    staged = version.for_stages()
    assert all(shard.entry.label_counts == {} for shard in staged.shards)
    assert staged == replace(version, shards=tuple(
        replace(s, entry=replace(s.entry, label_counts={})) for s in version.shards))
    assert [(s.split, s.build, s.entry.file, s.entry.num_examples, s.entry.sha256) for s in staged.shards] == [
        (s.split, s.build, s.entry.file, s.entry.num_examples, s.entry.sha256) for s in version.shards]
    assert all(shard.entry.label_counts for shard in version.shards)  # the launcher's version is unchanged


def test_each_carry_over_stage_holds_the_version_without_label_counts(shardsmith, version_rows, tmp_path):
    version = published(shardsmith, version_rows, tmp_path / "out")
    many = replace(version, shards=tuple(  # as a version of 1,000 labels would be
        replace(s, entry=replace(s.entry, label_counts={f"label{i}": i for i in range(1000)}))
        for s in version.shards))
    assert b"label999" in pickle.dumps(many)
    target = BuildTarget(str(tmp_path / "out"), new_build_id())
    for transform in (SplitCarriedRows(target, many),
                      PublishedCopies(target, many, None),
                      RewriteShards(WriterConfig(target, "pets"), many)):
        held = pickle.dumps(transform)
        assert version.previous.encode() in held and b"label999" not in held


HEX = "0123456789abcdef"


def test_the_copies_search_finds_every_wanted_sha256_of_a_row_list_whatever_its_other_fields_hold():
    """shardsmith/format/row_list.py `rows_with_sha256` against parsing every line, on lists row_list_bytes
    writes: URIs that are 64 hexadecimal digits (the field before the SHA-256 looks like one), end in `", `,
    hold quotes, commas, brackets or line breaks; with and without signatures; old five-field lines."""
    import random

    from shardsmith.format.row_list import ListedRow, parse_row_list, row_list_bytes, rows_with_sha256

    rng = random.Random(5)
    tricky = ['", ', '"]', ', "', "ä", ",", "]\n"]
    rows = []
    for i in range(2000):
        sha = "".join(rng.choice(HEX) for _ in range(64))
        kind = rng.randrange(5)
        uri = ("".join(rng.choice(HEX) for _ in range(64)) if kind == 0 else
               f"img/{i}{rng.choice(tricky)}" if kind == 1 else f"img/{i}.jpg")
        label = rng.choice(["cat", 'say "hi", ', "x" * 64])
        signature = rng.choice(["", "AAAA+/==", "B" * 64])
        rows.append(ListedRow(f"{i:032x}", 1, label, i, uri, "" if kind == 4 else sha, signature))
    data = row_list_bytes(rows)
    assert parse_row_list(data, "list") == rows
    for wanted in ({row.sha256 for row in rows[::7] if row.sha256},
                   {row.sha256 for row in rows if row.sha256 and len(row.uri) == 64}):
        expected = [row for row in rows if row.sha256 in wanted]
        assert expected and list(rows_with_sha256(data, wanted, "list")) == expected
