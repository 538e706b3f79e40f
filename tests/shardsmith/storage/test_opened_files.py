"""Check the file that was opened, not the path checked earlier: an image or a manifest swapped after its checks
(a folder replaced by a symlink out of --allowed_prefixes, a file replaced by a named pipe) is an error row, or
for a manifest a one-line usage error, and never a hang or a record holding another file's bytes.

The swaps happen at points the tests control (after the manifest and the size lookup are done, before the first
shard is handed to a writer; after the up-front manifest checks), never by racing a running build. A helper
thread opens each named pipe for writing whenever a reader waits on it, so that code which would wait forever
instead reads an empty file, and the test fails on what it reports rather than hanging.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from shardsmith.errors import UsageError
from shardsmith.images.load_images import ImageRejected, read_input_file
from shardsmith.manifest import ManifestFormat
from shardsmith.manifest.csv_file import header_problem

OUTSIDE = "image URI is outside --allowed_prefixes"
NOT_REGULAR = "file is not a regular file"


@contextlib.contextmanager
def readers_never_wait(*fifos: Path) -> Iterator[None]:
    """While open, any reader blocked on one of `fifos` gets end-of-file within about 20 ms."""
    stop = threading.Event()

    def unblock() -> None:
        while not stop.wait(0.02):
            for fifo in fifos:
                try:
                    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
                except OSError as e:
                    if e.errno not in (errno.ENXIO, errno.ENOENT):
                        raise

    thread = threading.Thread(target=unblock, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _prefixes(*folders: Path) -> tuple[str, ...]:
    return tuple(os.path.realpath(f) + "/" for f in folders)


def test_an_image_is_checked_against_the_prefix_where_it_was_opened(tmp_path, image_set_factory):
    allowed = image_set_factory(tmp_path / "allowed", {"a": {"train": 1}})
    secret = image_set_factory(tmp_path / "secret", {"a": {"train": 1}}, seed=1)
    uri = allowed.rows[0][1]
    path = str(allowed.path_of(uri))
    prefixes = _prefixes(tmp_path / "allowed")
    assert ManifestFormat(allowed_prefixes=prefixes).allows(path)
    original = read_input_file(path, 1 << 20, allowed_prefixes=prefixes)
    assert original == Path(path).read_bytes()

    (tmp_path / "allowed" / "img").rename(tmp_path / "allowed" / "img_real")
    (tmp_path / "allowed" / "img").symlink_to(tmp_path / "secret" / "img")
    with pytest.raises(ImageRejected) as rejected:
        read_input_file(path, 1 << 20, allowed_prefixes=prefixes)
    assert rejected.value.reason == OUTSIDE
    assert str(secret.root) not in rejected.value.detail  # nothing about where it leads
    # Without --allowed_prefixes a symlink is followed as before, and a symlink that stays inside is allowed.
    assert read_input_file(path, 1 << 20) == secret.path_of(uri).read_bytes()
    inside = tmp_path / "allowed" / "alias.jpg"
    inside.symlink_to(tmp_path / "allowed" / "img_real" / uri[len("img/"):])
    assert read_input_file(str(inside), 1 << 20, allowed_prefixes=prefixes) == original


@pytest.mark.parametrize("kind", ["fifo", "folder", "device"])
def test_an_image_that_is_not_a_regular_file_is_rejected_without_reading_it(kind, tmp_path):
    path = {"fifo": tmp_path / "pipe.jpg", "folder": tmp_path / "folder.jpg", "device": Path("/dev/zero")}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    with readers_never_wait(*([path] if kind == "fifo" else [])), pytest.raises(ImageRejected) as rejected:
        read_input_file(str(path), 1 << 20, expected_size=100)
    assert rejected.value.reason == NOT_REGULAR
    assert rejected.value.detail == {"fifo": "a named pipe (FIFO)", "folder": "a folder", "device": "a device"}[kind]


def test_a_manifest_swapped_for_a_fifo_before_its_header_is_read_is_a_usage_error(tmp_path):
    fifo = tmp_path / "manifest.csv"
    os.mkfifo(fifo)
    with readers_never_wait(fifo), pytest.raises(UsageError) as raised:
        header_problem(str(fifo), ManifestFormat())
    assert str(raised.value) == f"manifest {fifo} is a named pipe (FIFO), not a regular file"


def _errors(out: Path) -> list[dict]:
    published = json.loads((out / "metadata.json").read_text())
    return [json.loads(line) for line in (out / published["build_dir"] / "errors.jsonl").read_text().splitlines()]


def test_files_swapped_after_the_manifest_and_size_lookup_are_rejected_by_the_writer(
        tmp_path, image_set_factory, shardsmith, monkeypatch, read_records):
    """The issue's attack, made deterministic: the build reads the manifest and looks up every size, then, before
    the first shard goes to a writer process, allowed/img becomes a symlink to a secret folder holding images of
    the same names, and one other image becomes a named pipe. A named pipe there from the start fails the size
    lookup. None of the secret bytes reach a record, and nothing waits on a pipe."""
    allowed = tmp_path / "allowed"
    swapped = image_set_factory(allowed, {"a": {"train": 3}, "b": {"train": 3}})
    kept = image_set_factory(allowed / "kept", {"a": {"train": 4}, "b": {"train": 4}}, seed=2)
    secret = image_set_factory(tmp_path / "secret", {"a": {"train": 3}, "b": {"train": 3}}, seed=1)
    fifo_from_start = allowed / "pipe.jpg"
    os.mkfifo(fifo_from_start)
    with swapped.manifest.open("a") as f:
        f.write("train,pipe.jpg,a\n")
    becomes_fifo = kept.path_of(kept.rows[0][1])

    from shardsmith.shard_writer import shard_worker

    submit = shard_worker.ShardWriterPool.submit

    def swap_then_submit(self, *job):
        if not (allowed / "img_real").exists():
            (allowed / "img").rename(allowed / "img_real")
            (allowed / "img").symlink_to(secret.root / "img")
            becomes_fifo.unlink()
            os.mkfifo(becomes_fifo)
        return submit(self, *job)

    monkeypatch.setattr(shard_worker.ShardWriterPool, "submit", swap_then_submit)
    out = tmp_path / "out"
    with readers_never_wait(fifo_from_start, becomes_fifo):
        result = shardsmith("build", "--manifest", swapped.manifest, "--manifest", kept.manifest, "--output_dir", out,
                            "--name", "d", "--allowed_prefixes", str(allowed), "--num_shards", "train=2",
                            "--writer_processes", "2", "--max_error_fraction", "0.6")
    assert result.code == 0, result.err
    assert (allowed / "img_real").is_dir(), "the swap did not happen"
    errors = sorted((e["source"], e["uri"], e["stage"], e["reason"]) for e in _errors(out))
    swapped_manifest, kept_manifest = str(swapped.manifest), str(kept.manifest)
    expected = [(swapped_manifest, uri, "load", OUTSIDE) for _, uri, _ in swapped.rows]
    expected += [(swapped_manifest, "pipe.jpg", "lookup", NOT_REGULAR), (kept_manifest, kept.rows[0][1], "load",
                                                                         NOT_REGULAR)]
    assert errors == sorted(expected)
    assert all(e["detail"] == "a named pipe (FIFO)" for e in _errors(out) if e["reason"] == NOT_REGULAR)
    written = [r for shard in read_records(out, "train") for r in shard]
    assert sorted(r["image/filename"] for r in written) == sorted(uri for _, uri, _ in kept.rows[1:])
    secret_bytes = {secret.path_of(uri).read_bytes() for _, uri, _ in secret.rows}
    assert not secret_bytes & {r["image/encoded"] for r in written}


def test_a_manifest_swapped_for_a_fifo_after_the_up_front_checks_fails_the_build_in_one_line(
        tmp_path, image_set_factory, shardsmith, monkeypatch):
    manifest = image_set_factory(tmp_path, {"a": {"train": 2}, "b": {"train": 2}}).manifest

    from pipeline.commands import build

    checked_sources = build._checked_sources

    def check_then_swap(options):
        sources = checked_sources(options)
        manifest.unlink()
        os.mkfifo(manifest)
        return sources

    monkeypatch.setattr(build, "_checked_sources", check_then_swap)
    out = tmp_path / "out"
    with readers_never_wait(manifest):
        result = shardsmith("build", "--manifest", manifest, "--output_dir", out, "--name", "d")
    assert result.code == 2, result.err
    assert result.err.strip().splitlines() == [
        f"shardsmith: error: manifest {manifest} is a named pipe (FIFO), not a regular file"]
    assert not (out / "metadata.json").exists()
