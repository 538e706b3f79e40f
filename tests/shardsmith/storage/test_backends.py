"""The storage face picks one backend per path by its scheme, and every backend keeps the one protocol
(shardsmith/storage/backend.py): the same calls through the face do the same on a local disk, on Cloud Storage
(a real gcp-storage-emulator) and on S3 (a real moto server). A new scheme's backend joins `PLACES` below and
passes the same test (docs/extending.md)."""

from __future__ import annotations

import inspect

import pytest

from shardsmith import storage
from shardsmith.storage.backend import StorageBackend
from shardsmith.storage.beam_files import BeamFiles
from shardsmith.storage.local_disk import LocalDisk
from shardsmith.storage.s3_storage import S3Objects

BACKEND_CLASSES = (LocalDisk, BeamFiles, S3Objects)
PLACES = ("local", "gs", "s3")


def test_a_path_s_scheme_picks_its_backend_once():
    assert isinstance(storage.backend_for("/data/out/metadata.json"), LocalDisk)
    assert isinstance(storage.backend_for("relative/file"), LocalDisk)
    assert isinstance(storage.backend_for("s3://bucket/key"), S3Objects)
    assert isinstance(storage.backend_for("gs://bucket/key"), BeamFiles)
    assert isinstance(storage.backend_for("hdfs://name/key"), BeamFiles), "any other scheme: Beam's FileSystems"
    assert storage.backend_for("gs://a/b") is storage.backend_for("gs://c/d"), "one backend object a scheme"


@pytest.mark.parametrize("backend", BACKEND_CLASSES, ids=lambda c: c.__name__)
def test_every_backend_keeps_every_method_of_the_protocol_with_its_parameters(backend):
    wanted = {name: inspect.signature(member) for name, member in vars(StorageBackend).items()
              if inspect.isfunction(member) and not name.startswith("_")}
    assert len(wanted) >= 20
    for name, signature in wanted.items():
        assert hasattr(backend, name), f"{backend.__name__} has no {name}"
        assert list(inspect.signature(getattr(backend, name)).parameters) == list(signature.parameters), name
    assert isinstance(backend.remote, bool)


@pytest.fixture(params=PLACES)
def place(request, tmp_path) -> str:
    """A folder on each kind of place: a local one, a gs:// prefix on the emulator, an s3:// prefix on moto."""
    if request.param == "local":
        return str(tmp_path / "place")
    if request.param == "gs":
        return f"gs://{request.getfixturevalue('gcs_bucket').name}/place"
    return f"s3://{request.getfixturevalue('s3_bucket').name}/place"


def test_the_same_calls_do_the_same_on_every_place(place):
    storage.make_folders(storage.join(place, "a", "b"), exist_ok=True)
    storage.write_atomically(storage.join(place, "a", "one"), b"first")
    storage.write_atomically_from(storage.join(place, "a", "b", "two"), (b"sec", b"ond"))
    with storage.create(storage.join(place, "three")) as out:
        out.write(b"third")
    assert storage.read_bytes(storage.join(place, "a", "b", "two")) == b"second"
    assert storage.read_range(storage.join(place, "a", "one"), 1, 3) == b"irs"
    with storage.open_read(storage.join(place, "three")) as f:
        assert f.read() == b"third"
    assert storage.size(storage.join(place, "a", "one")) == 5
    assert storage.look_up(storage.join(place, "a", "one")).size == 5
    assert storage.look_up(storage.join(place, "nothing")).size is None
    assert storage.read_bytes(storage.join(place, "nothing")) is None
    assert storage.list_files(place) == ["a/b/two", "a/one", "three"]
    assert storage.list_entries(place) == {"a": True, "three": False}
    assert storage.is_folder(storage.join(place, "a")) and not storage.is_folder(storage.join(place, "three"))
    storage.rename([storage.join(place, "three")], [storage.join(place, "a", "moved")])
    assert not storage.exists(storage.join(place, "three"))
    assert storage.read_bytes(storage.join(place, "a", "moved")) == b"third"
    assert sorted(storage.match(storage.join(place, "a", "*"))) == [storage.join(place, "a", name)
                                                                     for name in ("moved", "one")], "files only"
    storage.delete([storage.join(place, "a", "one")])
    storage.remove_tree(place)
    storage.remove_empty_folders(place)
    assert storage.list_files(place) == [] and not storage.exists(storage.join(place, "a", "moved"))
