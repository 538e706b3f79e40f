"""Shard writer processes for local runs: N plain Python processes (`python -m shardsmith.core.shard_worker`), each
writing whole shards with shardsmith/core/shard_file.py, so that writing uses every core of the machine.

Why not Beam's multi_processing mode: its workers import Beam and every module of the graph (0.2 GB each, 0.7
GB more where tensorflow-transform's steps land) and, measured here, start in seconds; these import Pillow,
protobuf and crc32c only. Why not multiprocessing: its spawn and forkserver start methods import the parent's
__main__ module (here, the CLI and Beam) in every child.

Jobs and replies are pickles framed by an 8-byte length on the worker's stdin and stdout. A worker that dies
(killed, out of memory) fails the job that was on it, which fails the bundle: the runner's retry rewrites the
shard from scratch, as for any other lost attempt. A build that dies takes its workers with it
(shardsmith/core/lifeline.py): none renames a shard into place after the build is gone.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
import traceback
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

from shardsmith.core import faults, lifeline

_LENGTH = struct.Struct("<Q")
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[1])


class ShardWriterDied(RuntimeError):
    pass


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
    """The worker: (config, split, shard, rows) jobs in, ("ok", ShardOutcome) or ("error", text) replies out."""
    lifeline.die_with_parent()
    from shardsmith.core.shard_file import write_shard_file

    jobs = sys.stdin.buffer
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed goes to stderr, never into the reply stream
    while True:
        try:
            job = _receive(jobs)
        except EOFError:
            return
        try:
            reply = ("ok", write_shard_file(*job))
        except Exception as e:
            reply = ("error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}")
        _send(replies, reply)


_POOLS: weakref.WeakSet[ShardWriterPool] = weakref.WeakSet()


def kill_all_writers() -> None:
    """Kills every writer process of this process's pools at once (an interrupted build: a shard they were
    writing stays a temporary file in the unfinished build's folder, which the next run removes). Their jobs
    fail with ShardWriterDied."""
    for pool in list(_POOLS):
        pool.kill()


class ShardWriterPool:
    """`processes` worker processes; submit() returns a Future of the job's ShardOutcome. The workers die with
    this process, however it ends."""

    def __init__(self, processes: int):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_PACKAGE_ROOT, env.get("PYTHONPATH")]))
        env[lifeline.PARENT_ENV] = str(os.getpid())
        if faults.FAULT_ENV in env:
            env[faults.FAULT_ALSO_KILL_ENV] = str(os.getpid())  # a fault kills the whole build, as a lost machine
        self._workers: list[subprocess.Popen] = []
        self._closed = threading.Event()
        started = threading.Event()
        failed: list[BaseException] = []
        # PR_SET_PDEATHSIG fires when the *thread* that started a process ends, and the runner may retire the
        # thread that calls this: the workers are started from a thread of their own that lives until close().
        threading.Thread(target=self._start_and_stay, args=(processes, env, started, failed), name="shard-writers",
                         daemon=True).start()
        started.wait()
        if failed:
            raise failed[0]
        self._idle: queue.Queue[subprocess.Popen] = queue.Queue()
        for worker in self._workers:
            self._idle.put(worker)
        self._threads = ThreadPoolExecutor(processes)
        _POOLS.add(self)

    def _start_and_stay(self, processes: int, env: dict[str, str], started: threading.Event,
                        failed: list[BaseException]) -> None:
        try:
            for _ in range(processes):
                # A process group of their own: a terminal's Ctrl-C (SIGINT to the foreground group) reaches
                # only the build, which stops them, instead of a traceback from each.
                self._workers.append(subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE,
                                                      stdout=subprocess.PIPE, env=env, process_group=0))
        except BaseException as e:  # raised by __init__
            failed.append(e)
            for worker in self._workers:
                worker.kill()
                worker.wait()
            return
        finally:
            started.set()
        self._closed.wait()

    def submit(self, *job) -> Future:
        return self._threads.submit(self._run, job)

    def _run(self, job):
        worker = self._idle.get()
        try:
            _send(worker.stdin, job)
            status, value = _receive(worker.stdout)
        except (EOFError, OSError):
            raise ShardWriterDied(f"a shard writer process died (exit status {worker.wait()})") from None
        finally:
            self._idle.put(worker)  # a dead one too: the next job on it fails at once instead of waiting
        if status != "ok":
            raise RuntimeError(f"writing a shard failed: {value}")
        return value

    def kill(self) -> None:
        for worker in self._workers:
            with contextlib.suppress(OSError):
                worker.kill()

    def close(self) -> None:
        self._threads.shutdown(wait=True)
        for worker in self._workers:
            with contextlib.suppress(OSError):
                worker.stdin.close()
        for worker in self._workers:
            try:
                worker.wait(timeout=10)
            except subprocess.TimeoutExpired:
                worker.kill()
        self._closed.set()


if __name__ == "__main__":
    main()
