"""shardsmith.storage on s3:// against a real local S3-protocol server (moto's server, the suite's `s3_server`
fixture), through boto3 configured by the standard AWS environment as a user's machine is: reads, writes,
listing, globs, the upload that creates nothing when its writer fails, and the conditional writes (If-None-Match,
If-Match) the lock is built on, which moto enforces as S3 does."""

from __future__ import annotations

import gzip
import io
import os
import random

import google_crc32c
import pytest

from shardsmith import storage


class _Broke(Exception):
    pass


def _chunks_then_failure(*chunks: bytes):
    yield from chunks
    raise _Broke


def test_atomic_write_on_s3_creates_nothing_when_it_fails_and_replaces_whole_when_it_ends(s3_bucket, monkeypatch):
    from shardsmith.storage import s3_objects

    path = f"s3://{s3_bucket.name}/atomic/metadata.json"
    storage.write_atomically(path, b"old")
    with pytest.raises(_Broke):
        storage.write_atomically_from(path, _chunks_then_failure(b"part of the new"))
    assert s3_bucket.read(path) == b"old"
    storage.write_atomically_from(path, iter([b"n", b"ew"]))
    assert storage.read_bytes(path) == b"new"
    # Above PART_BYTES an upload is multipart: a failure aborts it, leaving no object and no upload behind.
    monkeypatch.setattr(s3_objects, "PART_BYTES", 5 << 20)  # S3's smallest part
    big = random.Random(2).randbytes(11 << 20)
    with pytest.raises(_Broke):
        storage.write_atomically_from(path, _chunks_then_failure(big[:6 << 20], big[6 << 20:]))
    assert s3_bucket.read(path) == b"new"
    assert not s3_bucket.client.list_multipart_uploads(Bucket=s3_bucket.name).get("Uploads")
    storage.write_atomically_from(path, iter([big[:3 << 20], big[3 << 20:]]))
    assert storage.read_bytes(path) == big and storage.size(path) == len(big)
    assert s3_bucket.keys("atomic/") == ["atomic/metadata.json"]


def test_reading_listing_globbing_renaming_and_deleting_on_s3(s3_bucket):
    root = f"s3://{s3_bucket.name}/tree"
    storage.make_folders(storage.join(root, "x"))  # nothing to make on an object store
    storage.write_atomically(storage.join(root, "x", "y", "deep.txt"), b"deep")
    storage.write_bytes(storage.join(root, "top.txt"), b"top!")
    storage.touch(storage.join(root, "entry"))
    assert storage.read_bytes(storage.join(root, "top.txt")) == b"top!"
    assert storage.read_bytes(storage.join(root, "missing.txt")) is None
    assert storage.exists(storage.join(root, "top.txt")) and not storage.exists(storage.join(root, "missing.txt"))
    assert storage.is_folder(storage.join(root, "x")) and not storage.is_folder(storage.join(root, "top.txt"))
    assert not storage.is_folder(storage.join(root, "nothing"))
    assert storage.size(storage.join(root, "x", "y", "deep.txt")) == 4
    assert storage.look_up(storage.join(root, "top.txt")) == storage.FileLookup(4)
    assert storage.look_up(storage.join(root, "missing.txt")) == storage.FileLookup(None)
    assert storage.list_files(root) == ["entry", "top.txt", "x/y/deep.txt"]
    assert storage.list_entries(root) == {"entry": False, "top.txt": False, "x": True}
    assert storage.list_files(f"s3://{s3_bucket.name}/nothing") == []
    assert storage.list_files("s3://no-such-bucket-here/x") == []
    assert storage.match(f"{root}/*.txt") == [f"{root}/top.txt"]  # `*` stays in its folder, `**` crosses them
    assert sorted(storage.match(f"{root}/**.txt")) == [f"{root}/top.txt", f"{root}/x/y/deep.txt"]
    assert storage.match(f"{root}/x/y/deep.txt") == [f"{root}/x/y/deep.txt"]
    assert storage.match(f"{root}/t?p.[st]xt") == [f"{root}/top.txt"]
    storage.rename([storage.join(root, "top.txt")], [storage.join(root, "x", "moved.txt")])
    assert storage.list_files(root) == ["entry", "x/moved.txt", "x/y/deep.txt"]
    storage.delete([storage.join(root, "entry"), storage.join(root, "entry")])  # gone already: no error
    storage.remove_empty_folders(root)  # nothing to remove on an object store
    storage.remove_tree(storage.join(root, "x"))
    assert s3_bucket.keys("tree/") == []


def test_s3_reads_are_the_stored_bytes_ranged_and_read_ahead(s3_bucket, monkeypatch):
    stored = gzip.compress(b"records", mtime=0)
    path = s3_bucket.put("raw/shard.tfrecord-00000-of-00001.gz", stored)
    with storage.open_read(path, buffered=True) as f:
        assert f.read() == stored  # never decompressed
    data = random.Random(5).randbytes(300_000)
    path = s3_bucket.put("ahead/shard", data)
    assert storage.read_range(path, 1000, 24) == data[1000:1024]
    assert storage.read_range(path, len(data) - 4, 100) == data[-4:]
    assert storage.read_range(path, len(data), 10) == b""
    monkeypatch.setattr(storage, "READ_AHEAD_BYTES", 64 * 1024)
    with storage.open_read(path, read_ahead=True) as f:
        assert isinstance(f, storage.ReadAhead)
        assert f.read(10) == data[:10]
        assert b"".join(iter(lambda: f.read(4096), b"")) == data[10:]
        f.seek(123_456)
        assert f.read(1000) == data[123_456:124_456]
        assert f.seek(-5, os.SEEK_END) == len(data) - 5 and f.read() == data[-5:]
    with pytest.raises(FileNotFoundError):
        storage.open_read(f"s3://{s3_bucket.name}/ahead/missing")


def test_a_stream_reads_the_version_it_opened_or_raises(s3_bucket, monkeypatch):
    monkeypatch.setattr(storage, "READ_AHEAD_BYTES", 1024)  # the stream's buffer: a request a KiB
    path = s3_bucket.put("versions/file", b"a" * 4096)
    with storage.open_read(path) as f:
        assert f.read(10) == b"a" * 10  # the buffered reader fetched its first KiB
        s3_bucket.put("versions/file", b"b" * 8192)
        f.seek(3000)  # past the buffer: a new request, on the ETag it opened
        with pytest.raises(OSError, match="was replaced while it was read"):
            f.read(10)


def test_hashed_shard_writer_on_s3_keeps_the_gs_gzip_bytes_and_the_checksum(s3_bucket, tmp_path):
    """s3:// gzip shards are written by Beam's gzip stream, as on gs://, so the two stores hold the same bytes;
    the checksum taken on the way is the stored object's."""
    from apache_beam.io.filesystem import CompressedFile, CompressionTypes

    from shardsmith.shard_writer.shard_output import HashedFile

    payload = random.Random(1).randbytes(300_000)
    class Kept(io.BytesIO):
        mode = "wb"  # what CompressedFile asks of the stream it writes to

        def close(self):
            self.kept = self.getvalue()
            super().close()

    expected = Kept()
    beams = CompressedFile(expected, compression_type=CompressionTypes.GZIP)
    beams.write(payload)
    beams.close()
    hashed = HashedFile(f"s3://{s3_bucket.name}/gz/ours", gzip_compressed=True)
    with hashed as out:
        out.write(payload)
    stored = s3_bucket.read(f"s3://{s3_bucket.name}/gz/ours")
    assert stored == expected.kept and gzip.decompress(stored) == payload
    assert hashed.hexdigest() == f"{google_crc32c.value(stored):08x}"
    head = s3_bucket.client.head_object(Bucket=s3_bucket.name, Key="gz/ours")
    assert head["ContentType"] == "application/x-gzip" and not head.get("ContentEncoding")


def test_conditional_writes_on_s3_create_once_and_replace_only_the_version_read(s3_bucket):
    """What the lock relies on, against the server: If-None-Match: * creates only when there is no object, If-Match
    replaces or deletes only the version read (its ETag), and a stale ETag changes nothing."""
    from shardsmith.storage.object_generations import S3VersionedObject, versioned_object

    lock = versioned_object(f"s3://{s3_bucket.name}/lock/.shardsmith-lock")
    assert isinstance(lock, S3VersionedObject)
    assert lock.read() is None
    assert not lock.write_if(b"replaced", '"0123"')  # If-Match on no object: not written
    assert lock.write_if(b"holder", 0)
    assert not lock.write_if(b"second", 0)  # If-None-Match: * refuses an object that is there
    seen = lock.read()
    assert seen is not None and seen.data == b"holder" and seen.age_s < 60
    assert lock.write_if(b"holder, refreshed", seen.token)
    assert not lock.write_if(b"taken over", seen.token)  # the version read was replaced: refused
    lock.delete_if(seen.token)  # a stale ETag deletes nothing
    now = lock.read()
    assert now is not None and now.data == b"holder, refreshed"
    lock.delete_if(now.token)
    assert lock.read() is None
    lock.delete_if(now.token)  # gone already: no error


def test_the_lock_on_s3_refuses_a_second_build_and_each_heartbeat_is_a_new_version(s3_bucket):
    from shardsmith.output_folder.lock import LockHeld, acquire_lock
    from shardsmith.output_folder.lock.lock_files import lock_file

    out = f"s3://{s3_bucket.name}/locked"
    held = acquire_lock(out, "build-1")
    with pytest.raises(LockHeld, match=r"is being built by build build-1 .*its process is alive on this host"):
        acquire_lock(out, "build-2", break_lock=True)
    lock = lock_file(out)
    before = lock.read()
    assert lock.refresh(before.token)
    after = lock.read()
    assert after.token != before.token  # new bytes, new ETag: a take-over read before the beat fails after it
    assert not lock.take_over(before.token, b"{}")
    assert held.guard.check() is None
    held.release()
    assert s3_bucket.keys("locked/") == []
    acquire_lock(out, "build-2").release()
