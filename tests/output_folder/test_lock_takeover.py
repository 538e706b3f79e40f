"""The output folder's lock against a stopped holder, a broken lock, an empty lock and a symlinked one
(shardsmith/output_folder/lock/). Builds are real processes, stopped with SIGSTOP and resumed with SIGCONT:
- `--break_lock` never takes the lock of a build whose process is alive on this host, however old its heartbeat;
- a build whose lock was taken over writes nothing more when it resumes, exits non-zero saying so, and leaves a
  folder the next build runs in without a person;
- a lock file left empty (a writer killed mid-create) is taken over at once when no process holds it;
- a symbolic link at the lock's path is refused in one line and neither it nor what it points to is touched.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shardsmith.format.naming import BUILD_RECORD, BUILDS_DIR, LOCK_FILE
from shardsmith.output_folder.lock import LOCK_STALE_AFTER_S, LockHolder, acquire_lock, release_lock

NUM_SHARDS = "train=2,validation=1,test=1"


def _tree(folder: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() and not p.is_symlink() else None)
            for p in sorted(folder.rglob("*"))}


def _args(manifest: Path, out: Path, *extra: str) -> list[str]:
    return ["build", "--manifest", str(manifest), "--output_dir", str(out), "--name", "pets",
            "--num_shards", NUM_SHARDS, *extra]


def _start_and_stop(manifest: Path, out: Path) -> subprocess.Popen:
    """A real build in a session of its own, stopped with SIGSTOP (its writer processes too,
    as a shell's Ctrl-Z would) as soon as it holds the lock and has started its build folder."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    build = subprocess.Popen([sys.executable, "-m", "pipeline", *_args(manifest, out)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    deadline = time.monotonic() + 120
    while not list((out / BUILDS_DIR).glob(f"*/{BUILD_RECORD}")):
        assert build.poll() is None and time.monotonic() < deadline, build.communicate()[1][-2000:]
        time.sleep(0.02)
    os.killpg(build.pid, signal.SIGSTOP)
    return build


def _age_heartbeat(out: Path, **changes) -> dict:
    """Sets the lock's heartbeat 11 minutes back (and rewrites fields of its holder, if given)."""
    lock = out / LOCK_FILE
    holder = json.loads(lock.read_bytes())
    if changes:
        holder.update(changes)
        lock.write_text(json.dumps(holder))
    long_ago = time.time() - LOCK_STALE_AFTER_S - 60
    os.utime(lock, (long_ago, long_ago))
    return holder


@pytest.fixture
def stopped_build(label_sorted_set, tmp_path):
    builds: list[subprocess.Popen] = []

    def start(out: Path) -> subprocess.Popen:
        builds.append(_start_and_stop(label_sorted_set.manifest, out))
        return builds[-1]

    yield start
    for build in builds:
        if build.poll() is None:
            os.killpg(build.pid, signal.SIGKILL)
            build.communicate()


def test_break_lock_never_takes_the_lock_of_a_live_process_on_this_host(label_sorted_set, tmp_path, shardsmith,
                                                                       stopped_build, metadata_of):
    out = tmp_path / "out"
    a = stopped_build(out)
    holder = _age_heartbeat(out)
    before = _tree(out)
    b = shardsmith(*_args(label_sorted_set.manifest, out, "--break_lock"))
    assert b.code == 2, b.err
    assert f"is being built by build {holder['build_id']} (process {a.pid} on" in b.err
    assert "alive on this host" in b.err and len(b.err.strip().splitlines()) == 1, b.err
    assert _tree(out) == before, "the live build's lock and folder are left as they were"
    os.killpg(a.pid, signal.SIGCONT)
    _, a_err = a.communicate(timeout=300)
    assert a.returncode == 0, a_err[-2000:]
    assert metadata_of(out)["build_id"] == holder["build_id"] and metadata_of(out)["num_examples"] == 285
    assert sorted(p.name for p in out.iterdir()) == [BUILDS_DIR, "metadata.json"]


def test_a_taken_over_build_writes_nothing_more_and_the_next_build_needs_no_person(
        label_sorted_set, tmp_path, shardsmith, stopped_build, metadata_of):
    out = tmp_path / "out"
    a = stopped_build(out)
    a_holder = _age_heartbeat(out, host="a-lost-airflow-worker")  # a lock of another machine, 11 minutes silent
    b = shardsmith(*_args(label_sorted_set.manifest, out, "--break_lock"))
    assert b.code == 0, b.err
    b_id = metadata_of(out)["build_id"]
    assert b_id != a_holder["build_id"]
    after_b = _tree(out)
    assert not (out / BUILDS_DIR / a_holder["build_id"]).exists(), "B removed A's unfinished folder"

    os.killpg(a.pid, signal.SIGCONT)
    _, a_err = a.communicate(timeout=300)
    assert a.returncode not in (0, None), a_err[-2000:]
    assert f"build {a_holder['build_id']} no longer holds the lock of {out}" in a_err, a_err[-2000:]
    assert "Traceback" not in a_err
    assert _tree(out) == after_b, "the taken-over build wrote nothing, and never recreated its folder"
    assert metadata_of(out)["build_id"] == b_id

    c = shardsmith(*_args(label_sorted_set.manifest, out, "--overwrite"))
    assert c.code == 0, c.err
    assert metadata_of(out)["build_id"] not in (a_holder["build_id"], b_id)


def test_an_empty_lock_left_by_a_killed_create_is_taken_over_at_once(label_sorted_set, tmp_path, shardsmith,
                                                                    metadata_of):
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_FILE).write_bytes(b"")  # fresh: written this instant, by a process that is gone
    result = shardsmith(*_args(label_sorted_set.manifest, out))
    assert result.code == 0, result.err
    assert metadata_of(out)["num_examples"] == 285
    assert not (out / LOCK_FILE).exists()


def test_an_unreadable_lock_a_live_process_holds_is_not_taken(label_sorted_set, tmp_path, shardsmith):
    out = tmp_path / "out"
    out.mkdir()
    lock = out / LOCK_FILE
    lock.write_bytes(b"")
    with open(lock, "rb") as held:  # this test process holds it, as a build does while it writes its lock
        fcntl.flock(held, fcntl.LOCK_EX)
        result = shardsmith(*_args(label_sorted_set.manifest, out, "--break_lock"))
    assert result.code == 2, result.err
    assert "unreadable" in result.err and "a live process holds it" in result.err
    assert sorted(p.name for p in out.iterdir()) == [LOCK_FILE] and lock.read_bytes() == b""


@pytest.mark.parametrize("target_exists", [True, False])
def test_a_symlink_at_the_lock_path_is_refused_and_left_alone(label_sorted_set, tmp_path, shardsmith,
                                                              target_exists):
    out = tmp_path / "out"
    out.mkdir()
    theirs = tmp_path / "their-notes.txt"
    if target_exists:
        theirs.write_bytes(b"a user's own file")
        long_ago = time.time() - LOCK_STALE_AFTER_S - 60
        os.utime(theirs, (long_ago, long_ago))
    (out / LOCK_FILE).symlink_to(theirs)
    for extra in ((), ("--break_lock",)):
        result = shardsmith(*_args(label_sorted_set.manifest, out, *extra))
        assert result.code == 2, result.err
        lines = result.err.strip().splitlines()
        assert len(lines) == 1 and str(out / LOCK_FILE) in lines[0] and "symbolic link" in lines[0], result.err
        assert os.readlink(out / LOCK_FILE) == str(theirs)
        assert sorted(p.name for p in out.iterdir()) == [LOCK_FILE]
        if target_exists:
            assert theirs.read_bytes() == b"a user's own file"
        else:
            assert not theirs.exists(), "nothing was written through the link"


def test_the_heartbeat_is_quiet_after_the_publish_step_releases_the_lock_and_loud_after_a_takeover(tmp_path, caplog):
    """The publish step releases the lock while the launcher's heartbeat still runs: a successful build must not
    log that its lock was taken over (seen under load). A real takeover is still logged."""
    released, taken = tmp_path / "released", tmp_path / "taken"
    for folder in (released, taken):
        folder.mkdir()
    quiet = acquire_lock(str(released), "20261125T000000Z-00000001")
    quiet.start_heartbeat(every_s=0.05)
    release_lock(str(released), "20261125T000000Z-00000001")  # as transforms/report.py does after publishing
    loud = acquire_lock(str(taken), "20261125T000000Z-00000002")
    loud.start_heartbeat(every_s=0.05)
    (taken / LOCK_FILE).write_bytes(LockHolder.this_process("20261125T000000Z-00000003").to_json())
    time.sleep(0.5)
    quiet.release()
    loud.release()
    taken_over = [r.getMessage() for r in caplog.records if "taken over" in r.getMessage()]
    assert taken_over == [f"the lock of {taken} was taken over; this build will not publish"]
