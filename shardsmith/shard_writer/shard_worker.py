"""Shard writer processes for local runs: N plain Python processes
(`python -m shardsmith.shard_writer.shard_worker`), each writing whole shards with
shardsmith/shard_writer/shard_file.py (or a part of one, shardsmith/shard_writer/split_shard.py), so that writing
uses every core of the machine.

Why not Beam's multi_processing mode: its workers import Beam and every module of the graph (0.2 GB each, 0.7
GB more where tensorflow-transform's steps land) and, measured here, start in seconds; these import Pillow,
protobuf and crc32c only. Why not multiprocessing: its spawn and forkserver start methods import the parent's
__main__ module (here, the CLI and Beam) in every child.

Jobs and replies are pickles framed by an 8-byte length on the worker's stdin and stdout. A job is (function,
config, split, shard, rows): one of the writing functions above, by reference, and its arguments. A worker that dies
(killed, out of memory) while it holds a shard is replaced, and the new process writes that shard once more from
scratch (the local runner does not retry a failed bundle); a second death on the same shard fails the build,
naming the shard. A worker that gives no answer within SHARD_DEADLINE_S is killed and its shard fails. A build
that dies takes its workers with it (shardsmith/shard_writer/orphaned_writers.py): none renames a shard into
place after the build is gone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
import time
import traceback
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

from shardsmith import fault_injection
from shardsmith.shard_writer import orphaned_writers
from shardsmith.shard_writer.orphaned_writers import exit_described

_LENGTH = struct.Struct("<Q")
# A shard job must come back (sent, written, answered) within this, or its writer is killed as stuck: far more
# than the largest shard needs (1 GiB read at 1 MB/s takes 17 minutes).
SHARD_DEADLINE_S = 3600.0
# Starting a writer process (Popen returns once it is running) takes milliseconds; this is for a machine in trouble.
START_DEADLINE_S = 60.0
_LOG = logging.getLogger("shardsmith")
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[1])


class ShardWriterDied(RuntimeError):
    """A shard could not be written because its writer processes died (or none could be started)."""


class ShardWriterStuck(RuntimeError):
    """A writer gave no answer on a shard within the deadline and was killed."""


def _send(stream: BinaryIO, message) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_LENGTH.pack(len(data)))
    stream.write(data)
    stream.flush()


def _receive(stream: BinaryIO):
    header = stream.read(_LENGTH.size)
    if len(header) < _LENGTH.size:
        raise EOFError
    return pickle.loads(stream.read(_LENGTH.unpack(header)[0]))


def main() -> None:
    """The worker: (function, config, split, shard, rows) jobs in, ("ok", what the function returned) or ("error",
    text) replies out."""
    orphaned_writers.die_with_parent()

    jobs = sys.stdin.buffer
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed goes to stderr, never into the reply stream
    while True:
        try:
            job = _receive(jobs)
        except EOFError:
            return
        try:
            reply = ("ok", job[0](*job[1:]))
        except Exception as e:
            reply = ("error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}")
        _send(replies, reply)


_POOLS: weakref.WeakSet[ShardWriterPool] = weakref.WeakSet()
# Held to add to _POOLS and to list it: the Ctrl-C watcher thread lists it while the build may be starting a pool,
# and a WeakSet changed during iteration raises. Reentrant: the main thread's SIGINT handler lists it too, and
# may run while that thread holds it.
_POOLS_LOCK = threading.RLock()


# A build's pool, by the build's folder: started by the first stage that needs it (ReadManifest, to parse a large
# manifest's lines; else WriteShards) and used by the next, so that its processes start once, while the launcher
# still reads rows. The launcher closes it when the build ends, however it ends (pipeline/cli.py).
_BUILD_POOLS: dict[str, ShardWriterPool] = {}
_BUILD_POOLS_LOCK = threading.Lock()


def build_pool(build_folder: str, processes: int) -> ShardWriterPool:
    """The writer pool of the build in `build_folder`, with at least `processes` writers: the one already
    started (grown if it has fewer), or a new one."""
    with _BUILD_POOLS_LOCK:
        pool = _BUILD_POOLS.get(build_folder)
        if pool is None:
            pool = _BUILD_POOLS[build_folder] = ShardWriterPool(processes)
        pool.grow(processes)
        return pool


def close_build_pool(build_folder: str) -> None:
    """Closes the pool of the build in `build_folder`, if it has one (waiting for the jobs in hand)."""
    with _BUILD_POOLS_LOCK:
        pool = _BUILD_POOLS.pop(build_folder, None)
    if pool is not None:
        pool.close()


def kill_all_writers() -> None:
    """Kills every writer process of this process's pools at once (an interrupted build: a shard they were
    writing stays a temporary file in the unfinished build's folder, which the next run removes). Their jobs
    fail with ShardWriterDied."""
    with _POOLS_LOCK:
        pools = list(_POOLS)
    for pool in pools:
        pool.kill()


class ShardWriterPool:
    """`processes` worker processes; submit() returns a Future of the job's ShardOutcome. The workers die with
    this process, however it ends.

    A writer that dies on a shard (killed, out of memory) is replaced by a new process, which writes that shard
    once more from scratch: the same bytes under the same final name, since a shard's bytes depend only on its
    rows (the dead writer's temporary file is removed when the build is published). A second death on the same
    shard fails it, naming the shard. A writer that gives no answer within `shard_deadline_s` is killed and its
    shard fails, naming it: every wait here has a deadline."""

    def __init__(self, processes: int, shard_deadline_s: float = SHARD_DEADLINE_S):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_PACKAGE_ROOT, env.get("PYTHONPATH")]))
        env[orphaned_writers.PARENT_ENV] = str(os.getpid())
        if fault_injection.FAULT_ENV in env:
            # a fault kills the whole build, as a lost machine would
            env[fault_injection.FAULT_ALSO_KILL_ENV] = str(os.getpid())
        self._env = env
        self._killed = threading.Event()  # kill(): an interrupted build; a dead writer is not replaced
        self._shard_deadline_s = shard_deadline_s
        self._workers: list[subprocess.Popen] = []
        self._workers_lock = threading.Lock()
        self._start_requests: queue.Queue[tuple[Future, dict[str, str]] | None] = queue.Queue()
        # PR_SET_PDEATHSIG fires when the *thread* that started a process ends, and the runner may retire the
        # thread that calls this: every writer, first or replacement, is started by a thread of its own that
        # lives until close().
        threading.Thread(target=self._start_on_request, name="shard-writers", daemon=True).start()
        self._idle: queue.Queue[subprocess.Popen] = queue.Queue()
        try:
            for _ in range(processes):
                self._idle.put(self._new_worker(env))
        except BaseException:
            self._stop_workers(grace_s=0)
            raise
        self._threads = ThreadPoolExecutor(processes)
        self._retired_threads: list[ThreadPoolExecutor] = []  # replaced by grow(), finishing the jobs they hold
        self.processes = processes
        with _POOLS_LOCK:
            _POOLS.add(self)

    def grow(self, processes: int) -> None:
        """Starts more writers, so that the pool has `processes` (a pool started with fewer, to parse a
        manifest's lines, that then writes more shards at once); a pool that has as many or more, or was killed (an
        interrupted build), is left as it is."""
        if processes <= self.processes or self._killed.is_set():
            return
        for _ in range(processes - self.processes):
            self._idle.put(self._new_worker(self._env))
        self._retired_threads.append(self._threads)
        self._threads = ThreadPoolExecutor(processes)
        self._retired_threads[-1].shutdown(wait=False)
        self.processes = processes

    def _start_on_request(self) -> None:
        while (request := self._start_requests.get()) is not None:
            started, env = request
            try:
                # A process group of their own: a terminal's Ctrl-C (SIGINT to the foreground group) reaches
                # only the build, which stops them, instead of a traceback from each.
                started.set_result(subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE,
                                                    stdout=subprocess.PIPE, env=env, process_group=0))
            except BaseException as e:  # raised by _new_worker
                started.set_exception(e)

    def _new_worker(self, env: dict[str, str]) -> subprocess.Popen:
        started: Future = Future()
        self._start_requests.put((started, env))
        try:
            worker = started.result(timeout=START_DEADLINE_S)
        except TimeoutError:
            raise ShardWriterDied(f"a shard writer process did not start within {START_DEADLINE_S:.0f} s: the "
                                  "machine may be overloaded; run the same command again") from None
        with self._workers_lock:
            self._workers.append(worker)
        return worker

    def submit(self, *job) -> Future:
        return self._threads.submit(self._run, job)

    def _run(self, job):
        shard = _Described(job)
        first_death = ""
        while True:
            worker = self._take_idle_worker()
            try:
                (status, value), killed_as_it_answered = self._exchange(worker, job, shard)
            except _WriterDied as died:
                if self._killed.is_set():
                    raise ShardWriterDied(f"the build was stopped while a writer wrote {shard}") from None
                self._replace(worker)
                if first_death:
                    raise ShardWriterDied(
                        f"a shard writer process died twice writing {shard} (first {first_death}, then {died}): "
                        "nothing was published. A writer killed by SIGKILL was most likely killed by the "
                        "out-of-memory killer: use fewer --writer_processes or smaller shards (--target_shard_mb), "
                        "then run the same command again") from None
                first_death = str(died)
                _LOG.warning("a shard writer process died before it finished %s (%s); rewriting it once in a new "
                             "process", shard, died)
                continue
            except ShardWriterStuck:
                self._replace(worker)
                raise
            except Exception as error:  # noqa: BLE001 - whatever it is, the writer goes back to the pool first
                # A reply this process cannot read (the writer ran other code: an upgrade between the launcher's
                # start and the writer's) or a job it could not send. Left out of the pool, the writer would
                # leave the next shard waiting for a free one until its deadline.
                self._replace(worker)
                raise ShardWriterDied(f"the exchange with the shard writer process for {shard} failed "
                                      f"({type(error).__name__}: {str(error)[:300]}): nothing was published; run "
                                      "the same command again") from None
            if killed_as_it_answered:
                self._replace(worker)
            else:
                self._idle.put(worker)
            if status != "ok":
                raise RuntimeError(f"{shard} failed: {value}")
            return value

    def _take_idle_worker(self) -> subprocess.Popen:
        # Each job thread holds one writer at a time, for at most one exchange and one replacement.
        wait_s = self._shard_deadline_s + 2 * START_DEADLINE_S
        deadline = time.monotonic() + wait_s
        while not self._killed.is_set():  # kill() hands no writer back: stop waiting for one
            try:
                return self._idle.get(timeout=max(0.0, min(1.0, deadline - time.monotonic())))
            except queue.Empty:
                if time.monotonic() >= deadline:
                    raise ShardWriterDied(f"no shard writer process was free within {wait_s:.0f} s") from None
        raise ShardWriterDied("the build was stopped before a writer took this shard")

    def _exchange(self, worker: subprocess.Popen, job, shard: _Described) -> tuple[tuple[str, object], bool]:
        """Sends the job and returns the writer's reply, and whether the deadline killed the writer as it
        answered (the answer stands, the writer does not)."""
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            worker.kill()

        timer = threading.Timer(self._shard_deadline_s, expire)
        timer.daemon = True
        timer.start()
        try:
            _send(worker.stdin, job)
            reply = _receive(worker.stdout)
        except (EOFError, OSError, pickle.UnpicklingError):
            how = exit_described(_reap(worker))
            if expired.is_set():
                raise ShardWriterStuck(
                    f"a shard writer process gave no answer on {shard} within {self._shard_deadline_s:.0f} s and "
                    "was killed: reading an image may hang (an unresponsive network file system?); nothing was "
                    "published; run the same command again") from None
            raise _WriterDied(how) from None
        finally:
            timer.cancel()
        return reply, expired.is_set()

    def _replace(self, worker: subprocess.Popen) -> None:
        """Puts a new writer in the dead (or killed) one's place."""
        if worker.poll() is None:
            worker.kill()
        _reap(worker)
        for pipe in (worker.stdin, worker.stdout):
            with contextlib.suppress(OSError):
                pipe.close()
        with self._workers_lock:
            if worker in self._workers:
                self._workers.remove(worker)
        self._idle.put(self._new_worker(fault_injection.replacement_environment(self._env)))

    def kill(self) -> None:
        self._killed.set()
        with self._workers_lock:
            workers = list(self._workers)
        for worker in workers:
            with contextlib.suppress(OSError):
                worker.kill()

    def close(self) -> None:
        """Waits for the jobs in hand (each has a deadline), then ends the writers: 10 s to exit, then killed."""
        for threads in (*self._retired_threads, self._threads):
            threads.shutdown(wait=True)
        self._stop_workers(grace_s=10)

    def _stop_workers(self, grace_s: float) -> None:
        with self._workers_lock:
            workers = list(self._workers)
        for worker in workers:
            with contextlib.suppress(OSError):
                worker.stdin.close()  # a writer's signal to exit
        for worker in workers:
            try:
                worker.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                worker.kill()
                _reap(worker)
        self._start_requests.put(None)  # the starting thread ends after the writers it started


class _WriterDied(Exception):
    """A writer process ended while it held a job; its text says how (exit code or signal)."""


def _reap(worker: subprocess.Popen) -> int:
    """The exit status of a writer whose pipes closed: it has exited or is exiting; killed if not within 10 s."""
    try:
        return worker.wait(timeout=10)
    except subprocess.TimeoutExpired:
        worker.kill()
        return worker.wait(timeout=10)


class _Described:
    """'train shard 3 of 8' for a job (function, config, split, shard, rows: lists of rows, or one list, a part of
    the shard), worked out only when a message is written: the shard count is in the rows, and a SealedBatch
    unpickles them to tell it. A function with a `describe_job(*args)` tells its own jobs ("lines 1025-2048 of
    manifest.csv")."""

    def __init__(self, job):
        self._job = job

    def __str__(self) -> str:
        describe = getattr(self._job[0], "describe_job", None)  # a job that is not a shard's says what it is
        if describe is not None:
            return describe(*self._job[1:])
        function, _, split, shard, rows = self._job
        first = next(iter(rows), None)
        dealt = rows if first is None or hasattr(first, "__iter__") else [rows]
        num_shards = next((row.num_shards for batch in dealt if len(batch) for row in batch), "?")
        part = " (a part of it)" if function.__name__ == "write_part" else ""
        return f"{split} shard {shard + 1} of {num_shards}{part}"


if __name__ == "__main__":
    main()
