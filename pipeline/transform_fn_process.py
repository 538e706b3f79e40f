"""tf.transform's step of a local build, in a process of its own started at launch.

Importing tensorflow-transform (and TensorFlow) takes 5-10 s of CPU, longer than writing 20,000 images. A local
build starts this process before it imports Beam: the import runs on a core the launcher leaves idle while it
imports Beam, reads the manifest and places rows; transform_fn is written as soon as the label vocabulary is
known, beside the shard writers; the launcher waits for it only after the shards are written, and never imports
TensorFlow itself.

The stage (transforms/labels.py `AnalyzeLabels`) gets a `TransformFnClient`, picklable: `start` sends
(vocabulary, output_dir, temp_dir) over a local socket and returns the request's key at once; `wait(key)`
returns when the process has written transform_fn, or raises with the process's one-line error. A request is
keyed by its content and done once, so a retried step that starts it again waits for the same work. The
process exits when the launcher closes its standard input, which also happens if the launcher dies.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import queue
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import Client, Listener

# How long a request waits for the process's socket to appear (it appears before TensorFlow is imported).
SOCKET_WAIT_S = 60.0
SOCKET_NAME = "transform_fn.sock"
# A Unix socket's path must fit in 108 bytes: the socket gets a short folder of its own.
_SOCKET_DIR_PREFIX = "shardsmith-tfp-"


@dataclass(frozen=True)
class TransformFnClient:
    """Has the process write transform_fn; picklable, so a Beam step can hold it. `start` hands over the
    request and returns at once; `wait` returns when that request is done (or raises with the process's
    one-line error). The build starts as soon as the vocabulary is known and waits after the shards."""

    address: str
    authkey: bytes

    def start(self, vocabulary, output_dir: str, temp_dir: str, lock=None) -> str:
        """Returns the request's key: the same request gives the same key, and is done once. `lock` (a
        LockGuard) is checked before transform_fn is written."""
        request = (vocabulary, output_dir, temp_dir, lock)
        key = hashlib.sha256(pickle.dumps(request)).hexdigest()
        self._ask(("start", key, request))
        return key

    def wait(self, key: str) -> str:
        ok, value = self._ask(("wait", key))
        if not ok:
            raise RuntimeError(f"tf.transform could not write transform_fn: {value}")
        return value

    def __call__(self, vocabulary, output_dir: str, temp_dir: str, lock=None) -> str:
        return self.wait(self.start(vocabulary, output_dir, temp_dir, lock))

    def _ask(self, message):
        with self._connect() as connection:
            connection.send(message)
            try:
                return connection.recv()
            except EOFError:
                raise RuntimeError("the tf.transform process exited before it wrote transform_fn") from None

    def _connect(self):
        deadline = time.monotonic() + SOCKET_WAIT_S
        while True:
            try:
                return Client(self.address, family="AF_UNIX", authkey=self.authkey)
            except (FileNotFoundError, ConnectionRefusedError):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the tf.transform process did not start (no socket at {self.address} "
                                       f"after {SOCKET_WAIT_S:.0f} s)") from None
                time.sleep(0.05)


_RUNNING: set[subprocess.Popen] = set()


def kill_all() -> None:
    """Kills every tf.transform process this process runs (an interrupted build); their requests fail."""
    for process in list(_RUNNING):
        with contextlib.suppress(OSError):
            process.kill()


@contextlib.contextmanager
def transform_fn_process() -> Iterator[TransformFnClient]:
    """Starts the process; yields its client; stops the process and removes its socket on exit."""
    socket_dir = tempfile.mkdtemp(prefix=_SOCKET_DIR_PREFIX)
    client = TransformFnClient(os.path.join(socket_dir, SOCKET_NAME), secrets.token_bytes(32))
    # process_group=0: a terminal's Ctrl-C reaches only the launcher, which then closes stdin (the exit signal).
    process = subprocess.Popen([sys.executable, "-m", "pipeline.transform_fn_process", client.address],
                               stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, process_group=0)
    _RUNNING.add(process)
    try:
        process.stdin.write(client.authkey.hex().encode() + b"\n")
        process.stdin.flush()
        yield client
    finally:
        with contextlib.suppress(OSError):
            process.stdin.close()  # the process's signal to exit
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        _RUNNING.discard(process)
        shutil.rmtree(socket_dir, ignore_errors=True)


def _exit_when_stdin_closes() -> None:
    sys.stdin.buffer.read()
    os._exit(0)


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class _Requests:
    """Requests by key, each done once, one at a time, in the order they came; waits block until theirs is."""

    def __init__(self):
        self._lock = threading.Lock()
        self._done: dict[str, threading.Event] = {}
        self._results: dict[str, tuple[bool, str]] = {}
        self._queue: queue.Queue = queue.Queue()

    def start(self, key: str, request) -> None:
        with self._lock:
            if key in self._done:
                return
            self._done[key] = threading.Event()
        self._queue.put((key, request))

    def wait(self, key: str) -> tuple[bool, str]:
        with self._lock:
            done = self._done.get(key)
        if done is None:
            return False, "no such request (the build sent none for this vocabulary)"
        done.wait()
        return self._results[key]

    def work(self, write) -> None:
        while True:
            key, request = self._queue.get()
            try:
                self._results[key] = (True, write(*request))
            except Exception as error:  # the launcher raises it in the build, with this text
                self._results[key] = (False, _one_line(error))
            self._done[key].set()


def _answer(connection, requests: _Requests) -> None:
    with connection:
        message = connection.recv()
        if message[0] == "start":
            requests.start(message[1], message[2])
            connection.send((True, message[1]))
        else:
            connection.send(requests.wait(message[1]))


def serve(address: str) -> None:
    """The process: listens first, then imports tensorflow-transform, then does requests as they come."""
    authkey = bytes.fromhex(sys.stdin.buffer.readline().decode().strip())
    threading.Thread(target=_exit_when_stdin_closes, name="watch-launcher", daemon=True).start()
    requests = _Requests()
    with Listener(address, family="AF_UNIX", authkey=authkey) as listener:
        threading.Thread(target=_accept, args=(listener, requests), name="accept", daemon=True).start()
        from pipeline.quiet import quiet

        quiet()
        import logging

        if not os.environ.get("SHARDSMITH_DEBUG"):  # as the launcher's local build: failures come back as text
            for name in ("apache_beam", "tensorflow_transform", "absl", "tensorflow"):
                logging.getLogger(name).setLevel(logging.CRITICAL)
        import tensorflow_transform.beam  # noqa: F401  (the seconds this process exists to spend early)

        from transforms.labels import write_transform_fn

        requests.work(write_transform_fn)


def _accept(listener: Listener, requests: _Requests) -> None:
    while True:
        connection = listener.accept()
        threading.Thread(target=_answer, args=(connection, requests), daemon=True).start()


if __name__ == "__main__":
    serve(sys.argv[1])
