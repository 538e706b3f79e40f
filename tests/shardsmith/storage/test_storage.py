"""shardsmith.storage on real files: a local folder, and gs:// on a real local Cloud Storage server
(gcp-storage-emulator, the suite's `emulator` fixture) through Beam's GCS client, as builds use it."""

from __future__ import annotations

import gzip
import os
import random
import threading

import google_crc32c
import pytest

from shardsmith import storage
from shardsmith.storage.local_files import NotARegularFile, OutsideAllowedPrefixes, write_pieces

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


@pytest.mark.parametrize("most_per_call", [1, 5, 12, 1000, None])
def test_pieces_are_written_whole_and_in_order_however_few_bytes_each_writev_takes(tmp_path, monkeypatch,
                                                                                    most_per_call):
    # The kernel may take fewer bytes than a writev was given (a signal, a full disk's last blocks): the rest
    # follows from where it stopped. A real writev, limited to `most_per_call` bytes a call.
    writev = os.writev

    def short_writev(fd, buffers):
        if most_per_call is None:
            return writev(fd, buffers)
        taken, left = [], most_per_call
        for buffer in buffers:
            if left == 0:
                break
            taken.append(memoryview(buffer)[:left])
            left -= len(taken[-1])
        return writev(fd, taken)

    monkeypatch.setattr(os, "writev", short_writev)
    pieces = [b"head", b"", random.Random(5).randbytes(3000), b"x", b"tail"]
    path = tmp_path / "pieces.bin"
    with open(path, "wb") as f:
        f.write(b"before:")
        f.flush()
        write_pieces(f.fileno(), pieces)
        write_pieces(f.fileno(), pieces[::-1])
    assert path.read_bytes() == b"before:" + b"".join(pieces) + b"".join(pieces[::-1])


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


# Read-ahead -----------------------------------------------------------------------------------------------------

class _CountingStream:
    """An in-memory stream that records each read's size and whether it ran on a read-ahead thread."""

    def __init__(self, data: bytes):
        import io

        self._stream = io.BytesIO(data)
        self.reads: list[tuple[int, bool]] = []
        self.closed_by_caller = False

    def read(self, size: int = -1) -> bytes:
        self.reads.append((size, threading.current_thread() is not threading.main_thread()))
        return self._stream.read(size)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._stream.seek(offset, whence)

    def tell(self) -> int:
        return self._stream.tell()

    def close(self) -> None:
        self.closed_by_caller = True


def test_read_ahead_gives_the_same_bytes_for_any_reads_and_seeks():
    data = random.Random(3).randbytes(2_500)  # a few chunks of 1,000, many of 64: every read size crosses them
    rng = random.Random(4)
    for _ in range(300):
        stream = storage.ReadAhead(_CountingStream(data), chunk=rng.choice((1, 7, 64, 1000, 20_000)))
        position = 0
        for _ in range(rng.randrange(1, 12)):
            move = rng.random()
            if move < 0.25:
                position = rng.randrange(len(data) + 10)
                assert stream.seek(position) == position
            elif move < 0.35:
                step = rng.randrange(-50, 50)
                position = max(0, position + step)
                assert stream.seek(position - stream.tell(), os.SEEK_CUR) == position
            elif move < 0.4:
                back = rng.randrange(0, 100)
                position = max(0, len(data) - back)
                assert stream.seek(-back, os.SEEK_END) == position
            size = rng.choice((-1, 0, 1, 5, 100, 3000, 50_000)) if rng.random() < 0.95 else None
            got = stream.read(size)
            want = data[position:] if size is None or size < 0 else data[position:position + size]
            assert got == want
            position += len(want)
            assert stream.tell() == position
        stream.close()
        assert stream.closed and stream._raw.closed_by_caller


def test_read_ahead_fetches_ahead_only_once_a_chunk_was_read_through():
    data = bytes(range(256)) * 100  # 25,600 bytes: 25 chunks of 1,000 (and a part)
    scattered = storage.ReadAhead(_CountingStream(data), chunk=1000)
    for offset in (5000, 100, 17_000, 9000):  # a record at a time, at scattered offsets: nothing more is fetched
        scattered.seek(offset)
        assert scattered.read(30) == data[offset:offset + 30]
    assert scattered._raw.reads == [(1000, False)] * 4

    streamed = storage.ReadAhead(_CountingStream(data), chunk=1000)
    assert b"".join(iter(lambda: streamed.read(333), b"")) == data
    reads = streamed._raw.reads
    assert reads[:2] == [(1000, False), (1000, False)], "the first two chunks are read when asked for"
    assert all(ahead for _, ahead in reads[2:]), "from the third on, each is fetched ahead"
    assert len(reads) == 26, "26 chunks (the last a part, the end: nothing is fetched after it), each byte once"
    assert streamed.read(5) == b"" and len(streamed._raw.reads) == 26


def test_a_read_ahead_error_reaches_the_reader_at_those_bytes_and_not_after_a_seek():
    class Failing(_CountingStream):
        def read(self, size: int = -1) -> bytes:
            if self._stream.tell() >= 3000:
                raise OSError("the store failed")
            return super().read(size)

    data = bytes(10_000)
    stream = storage.ReadAhead(Failing(data), chunk=1000)
    assert stream.read(2500) == data[:2500]  # the fetch of 3000..3999 runs ahead and fails
    stream.seek(0)  # those bytes are not the caller's: no error
    assert stream.read(3000) == data[:3000]  # and again
    with pytest.raises(OSError, match="the store failed"):
        stream.read(1)


def test_closing_a_read_ahead_stream_does_not_wait_for_the_fetch_under_way():
    import time

    fetching, release = threading.Event(), threading.Event()

    class Slow(_CountingStream):
        def read(self, size: int = -1) -> bytes:
            if threading.current_thread() is not threading.main_thread():
                fetching.set()
                release.wait(10)
            return super().read(size)

    stream = storage.ReadAhead(Slow(bytes(10_000)), chunk=1000)
    assert stream.read(1500) == bytes(1500)
    assert fetching.wait(10), "the third chunk is being fetched ahead (and waits)"
    started = time.monotonic()
    stream.close()
    assert time.monotonic() - started < 1 and stream.closed and not stream._raw.closed_by_caller
    release.set()
    deadline = time.monotonic() + 10
    while not stream._raw.closed_by_caller and time.monotonic() < deadline:
        time.sleep(0.01)
    assert stream._raw.closed_by_caller, "closed once the fetch ended"


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
    with storage.open_read(f"gs://{BUCKET}/raw/shard.tfrecord-00000-of-00001.gz", read_ahead=True) as f:
        assert f.read() == stored


def test_gs_read_ahead_streams_an_object_of_many_chunks_as_stored(bucket, monkeypatch):
    data = random.Random(5).randbytes(300_000)
    bucket.blob("ahead/shard").upload_from_string(data)
    monkeypatch.setattr(storage, "READ_AHEAD_BYTES", 64 * 1024)
    with storage.open_read(f"gs://{BUCKET}/ahead/shard", read_ahead=True) as f:
        assert isinstance(f, storage.ReadAhead)
        assert f.read(10) == data[:10]
        assert b"".join(iter(lambda: f.read(4096), b"")) == data[10:]
        f.seek(123_456)
        assert f.read(1000) == data[123_456:124_456]
        assert f.seek(-5, os.SEEK_END) == len(data) - 5 and f.read() == data[-5:]


def test_hashed_shard_writer_on_gs_keeps_beams_gzip_bytes(bucket):
    """gs:// shards keep the bytes Beam's `FileSystems.create(..., compression_type=GZIP)` writes, and the
    checksum taken on the way is the stored object's."""
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    from shardsmith.shard_writer.shard_output import HashedFile

    payload = random.Random(1).randbytes(300_000)
    with FileSystems.create(f"gs://{BUCKET}/gz/beam", compression_type=CompressionTypes.GZIP) as out:
        out.write(payload)
    hashed = HashedFile(f"gs://{BUCKET}/gz/ours", gzip_compressed=True)
    with hashed as out:
        out.write(payload)
    ours = bucket.get_blob("gz/ours")
    assert ours.download_as_bytes() == bucket.blob("gz/beam").download_as_bytes()
    assert hashed.hexdigest() == f"{google_crc32c.value(ours.download_as_bytes()):08x}"
    assert ours.content_type == "application/x-gzip"
    assert gzip.decompress(ours.download_as_bytes()) == payload


def test_versioned_object_reads_its_generation_and_deletes_on_it(bucket):
    from shardsmith.storage.object_generations import VersionedObject

    lock = VersionedObject(f"gs://{BUCKET}/lock/.shardsmith-lock")
    assert lock.read() is None
    assert lock.write_if(b"holder", 0)
    seen = lock.read()
    assert seen is not None and seen.data == b"holder" and seen.age_s < 60  # the emulator keeps no generations
    lock.delete_if(seen.token)
    assert lock.read() is None
    lock.delete_if(seen.token)  # gone already: no error
