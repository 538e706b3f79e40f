"""shardsmith/format/metadata.py: reading metadata.json (the same bytes read lately are not parsed again)."""

from __future__ import annotations

import shutil

import pytest

from shardsmith.format import metadata as metadata_module
from shardsmith.format.metadata import read_metadata
from shardsmith.format.metadata_schema import MetadataError, metadata_bytes, parse_metadata


def test_every_read_gives_its_own_copy_of_what_the_files_bytes_say_now(built, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(built, out)
    path = out / "metadata.json"
    first, again = read_metadata(str(out)), read_metadata(str(out))
    assert first == again == parse_metadata(path.read_bytes()) and first is not again
    assert first.splits is not again.splits and first.labels is not again.labels
    again.labels.append("changed by its reader")  # one reader's change never reaches another's copy
    assert read_metadata(str(out)).labels == first.labels
    edited = parse_metadata(path.read_bytes())
    edited.seed += 1
    path.write_bytes(metadata_bytes(edited))  # the file read, not the one seen before
    assert read_metadata(str(out)).seed == first.seed + 1
    path.write_bytes(b"{not json")
    with pytest.raises(MetadataError, match="is not valid JSON"):
        read_metadata(str(out))


def test_the_files_kept_parsed_stay_within_their_bound(built, monkeypatch):
    original = parse_metadata((built / "metadata.json").read_bytes())
    variants = []
    for seed in range(4):
        original.seed = seed
        variants.append(metadata_bytes(original))
    monkeypatch.setattr(metadata_module, "RECENT_METADATA_BYTES", 2 * max(map(len, variants)))
    monkeypatch.setattr(metadata_module, "_recent", type(metadata_module._recent)())
    for seed, data in enumerate(variants):
        assert read_metadata(str(built), lambda path, data=data: data).seed == seed
    assert [parse_metadata(data).seed for data, _ in metadata_module._recent] == [2, 3]  # the last two read
