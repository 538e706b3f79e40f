"""shardsmith.storage on real files: a local folder, and gs:// on a real local Cloud Storage server
(gcp-storage-emulator, the suite's `emulator` fixture) through Beam's GCS client, as builds use it."""

from __future__ import annotations

import gzip
import hashlib
import os
import random
import threading

import pytest

from shardsmith import storage
from shardsmith.storage.local_files import NotARegularFile, OutsideAllowedPrefixes

BUCKET = "shardsmith-storage"


class _Broke(Exception):
    pass


def _chunks_then_failure(*chunks: bytes):
    yield from chunks
    raise _Broke("the source failed part-way")


# Local ----------------------------------------------------------------------------------------------------------

def test_atomic_write_replaces_the_file_and_leaves_no_temporary_file(tmp_path):
    path = str(tmp_path / "metadata.json")
    storage.write_atomically(path, b"old")
    storage.write_atomically_from(path, iter([b"n", b"ew"]))
    assert (tmp_path / "metadata.json").read_bytes() == b"new"
    assert os.listdir(tmp_path) == ["metadata.json"]


def test_a_failed_atomic_write_leaves_the_old_file_and_removes_its_temporary_file(tmp_path):
    """On main the temporary file stayed behind (for the build's cleanup to sweep)."""
    path = str(tmp_path / "labels.txt")
    storage.write_atomically(path, b"old content")
    with pytest.raises(_Broke):
        storage.write_atomically_from(path, _chunks_then_failure(b"part of the new"))
    assert (tmp_path / "labels.txt").read_bytes() == b"old content"
    assert os.listdir(tmp_path) == ["labels.txt"]


def test_temporary_names_sit_beside_the_file_under_the_temporary_prefix(tmp_path):
    temp = storage.temporary_path(f"{tmp_path}/a/b.json")
    folder, name = temp.rsplit("/", 1)
    assert folder == f"{tmp_path}/a" and name.startswith(f"{storage.TEMP_PREFIX}b.json.") and len(name) == len(
        f"{storage.TEMP_PREFIX}b.json.") + 16


def test_reading_listing_and_deleting_local_files(tmp_path):
    root = str(tmp_path)
    storage.make_folders(storage.join(root, "x", "y"))
    storage.write_atomically(storage.join(root, "x", "y", "deep.txt"), b"deep")
    storage.write_bytes(storage.join(root, "top.txt"), b"top!")
    (tmp_path / "empty").mkdir()
    assert storage.read_bytes(storage.join(root, "top.txt")) == b"top!"
    assert storage.read_bytes(storage.join(root, "missing.txt")) is None
    assert storage.exists(storage.join(root, "top.txt")) and not storage.exists(storage.join(root, "missing.txt"))
    assert storage.size(storage.join(root, "x", "y", "deep.txt")) == 4
    assert storage.list_files(root) == ["top.txt", "x/y/deep.txt"]
    assert storage.list_entries(root) == {"top.txt": False, "x": True, "empty": True}
    assert storage.list_files(storage.join(root, "nothing")) == [] and storage.list_entries(root + "/no") == {}
    storage.rename([storage.join(root, "top.txt")], [storage.join(root, "x", "moved.txt")])
    assert storage.list_files(root) == ["x/moved.txt", "x/y/deep.txt"]
    storage.delete([storage.join(root, "x", "moved.txt"), storage.join(root, "x", "gone-already.txt")])
    storage.remove_empty_folders(root)  # keeps x/y (it holds a file) and so x and the root
    assert storage.list_entries(root) == {"x": True}
    storage.remove_tree(storage.join(root, "x"))
    assert os.listdir(tmp_path) == []


def test_rename_never_makes_a_missing_folder(tmp_path):
    """A writer whose build folder was removed fails instead of making it again."""
    (tmp_path / "shard").write_bytes(b"x")
    with pytest.raises(FileNotFoundError):
        storage.rename([str(tmp_path / "shard")], [str(tmp_path / "removed-build" / "shard")])
    with pytest.raises(FileNotFoundError):
        storage.make_folder(str(tmp_path / "removed-build" / "written"))
    assert sorted(os.listdir(tmp_path)) == ["shard"]


def test_touch_keeps_what_is_there(tmp_path):
    path = str(tmp_path / "entry")
    storage.touch(path)
    assert (tmp_path / "entry").read_bytes() == b""
    (tmp_path / "entry").write_bytes(b"kept")
    storage.touch(path)
    assert (tmp_path / "entry").read_bytes() == b"kept"


def test_input_files_are_judged_as_opened(tmp_path):
    fifo = tmp_path / "pipe.jpg"
    os.mkfifo(fifo)
    result = []
    reader = threading.Thread(target=lambda: result.append(_open_error(str(fifo))), daemon=True)
    reader.start()
    reader.join(10)
    assert result and isinstance(result[0], NotARegularFile) and result[0].kind == "a named pipe (FIFO)"
    assert storage.look_up(str(fifo)) == storage.FileLookup(None, "a named pipe (FIFO)")
    outside = tmp_path / "outside.jpg"
    outside.write_bytes(b"secret")
    with pytest.raises(OutsideAllowedPrefixes):
        storage.open_read(str(outside), (str(tmp_path / "inside") + "/",))
    assert storage.look_up(str(outside)) == storage.FileLookup(6)
    assert storage.look_up(str(tmp_path / "missing.jpg")) == storage.FileLookup(None)
    with storage.open_read(str(outside), buffered=True) as f:
        assert f.read(3) == b"sec" and f.read() == b"ret"


def _open_error(path: str) -> Exception | None:
    try:
        storage.open_read(path).close()
    except Exception as e:  # noqa: BLE001 (the test asserts which)
        return e
    return None


def test_local_gzip_is_the_bytes_gzip_writes_with_no_name_and_no_time(tmp_path):
    payload = random.Random(2).randbytes(100_000)
    path = str(tmp_path / "x.gz")
    with storage.create(path, gzip_compressed=True) as raw, storage.gzip_writer(raw, path) as out:
        out.write(payload)
    written = (tmp_path / "x.gz").read_bytes()
    assert written[:4] == b"\x1f\x8b\x08\x00" and written[4:8] == bytes(4)  # gzip, deflate, no name, no time
    assert gzip.decompress(written) == payload


def test_paths_and_uris_are_told_apart():
    assert storage.is_remote("gs://b/x") and not storage.is_remote("/data/x") and not storage.is_remote("x")
    assert storage.is_cloud_storage("gs://b/x") and not storage.is_cloud_storage("s3://b/x")
    assert storage.join("gs://b/out/", "builds", "id") == "gs://b/out/builds/id"
    assert storage.parent("gs://b/out/m.json") == "gs://b/out" and storage.parent("/d/m.json") == "/d"


# gs:// on the emulator ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def bucket(emulator, beam_on_emulator):
    with beam_on_emulator(emulator) as (client, _):
        client.create_bucket(BUCKET)
        yield client.bucket(BUCKET)


def _objects(bucket, prefix: str) -> list[str]:
    return sorted(blob.name for blob in bucket.client.list_blobs(BUCKET, prefix=prefix))


def test_atomic_write_on_gs_leaves_no_temporary_object_and_a_failed_one_leaves_the_old(bucket):
    path = f"gs://{BUCKET}/atomic/metadata.json"
    storage.write_atomically(path, b"old")
    with pytest.raises(_Broke):
        storage.write_atomically_from(path, _chunks_then_failure(b"part of the new"))
    assert bucket.blob("atomic/metadata.json").download_as_bytes() == b"old"
    storage.write_atomically_from(path, iter([b"n", b"ew"]))
    assert storage.read_bytes(path) == b"new"
    assert _objects(bucket, "atomic/") == ["atomic/metadata.json"]


def test_reading_listing_renaming_and_deleting_on_gs(bucket):
    root = f"gs://{BUCKET}/tree"
    storage.make_folders(storage.join(root, "x"))  # nothing to make on an object store
    storage.write_atomically(storage.join(root, "x", "y", "deep.txt"), b"deep")
    storage.write_bytes(storage.join(root, "top.txt"), b"top!")
    storage.touch(storage.join(root, "entry"))
    assert storage.read_bytes(storage.join(root, "top.txt")) == b"top!"
    assert storage.read_bytes(storage.join(root, "missing.txt")) is None
    assert storage.exists(storage.join(root, "top.txt")) and not storage.exists(storage.join(root, "missing.txt"))
    assert storage.size(storage.join(root, "x", "y", "deep.txt")) == 4
    assert storage.look_up(storage.join(root, "top.txt")) == storage.FileLookup(4)
    assert storage.look_up(storage.join(root, "missing.txt")) == storage.FileLookup(None)
    assert storage.list_files(root) == ["entry", "top.txt", "x/y/deep.txt"]
    assert storage.list_entries(root) == {"entry": False, "top.txt": False, "x": True}
    assert storage.list_files(f"gs://{BUCKET}/nothing") == []
    storage.rename([storage.join(root, "top.txt")], [storage.join(root, "x", "moved.txt")])
    assert storage.list_files(root) == ["entry", "x/moved.txt", "x/y/deep.txt"]
    storage.delete([storage.join(root, "entry")])
    storage.remove_empty_folders(root)  # nothing to remove on an object store
    storage.remove_tree(storage.join(root, "x"))
    assert _objects(bucket, "tree/") == []


def test_gs_reads_are_the_stored_bytes_never_decompressed(bucket):
    stored = gzip.compress(b"records", mtime=0)
    bucket.blob("raw/shard.tfrecord-00000-of-00001.gz").upload_from_string(stored)
    with storage.open_read(f"gs://{BUCKET}/raw/shard.tfrecord-00000-of-00001.gz", buffered=True) as f:
        assert f.read() == stored


def test_hashed_shard_writer_on_gs_keeps_beams_gzip_bytes(bucket):
    """gs:// shards keep the bytes Beam's `FileSystems.create(..., compression_type=GZIP)` writes, and the hash
    taken on the way is the stored object's."""
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    from shardsmith.core.shard_file import HashedFile

    payload = random.Random(1).randbytes(300_000)
    with FileSystems.create(f"gs://{BUCKET}/gz/beam", compression_type=CompressionTypes.GZIP) as out:
        out.write(payload)
    hashed = HashedFile(f"gs://{BUCKET}/gz/ours", gzip_compressed=True)
    with hashed as out:
        out.write(payload)
    ours = bucket.get_blob("gz/ours")
    assert ours.download_as_bytes() == bucket.blob("gz/beam").download_as_bytes()
    assert hashed.hexdigest() == hashlib.sha256(ours.download_as_bytes()).hexdigest()
    assert ours.content_type == "application/x-gzip"
    assert gzip.decompress(ours.download_as_bytes()) == payload


def test_versioned_object_reads_its_generation_and_deletes_on_it(bucket):
    from shardsmith.storage.generations import VersionedObject

    lock = VersionedObject(f"gs://{BUCKET}/lock/.shardsmith-lock")
    assert lock.read() is None
    assert lock.write_if(b"holder", 0)
    seen = lock.read()
    assert seen is not None and seen.data == b"holder" and seen.age_s < 60  # the emulator keeps no generations
    lock.delete_if(seen.generation)
    assert lock.read() is None
    lock.delete_if(seen.generation)  # gone already: no error
