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

Nothing here waits without a deadline. A connection that fails its handshake (a wrong key, a client that says
nothing) is logged and closed by its own thread while the process keeps serving others. If the process dies,
the launcher writes its exit status beside the socket at once, and a client fails within moments with a
message that names it, instead of waiting for a socket that will not answer.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import pickle
import queue
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import (
    AuthenticationError,
    Connection,
    Listener,
    answer_challenge,
    deliver_challenge,
)

from shardsmith.core.lifeline import exit_described

# How long a request waits for the process's socket to appear (it appears before TensorFlow is imported).
SOCKET_WAIT_S = 60.0
# Every read and write of a handshake, and the answer to `start`. The process answers in milliseconds when idle,
# but its main thread imports TensorFlow meanwhile and can hold the GIL for seconds on a loaded machine (a 10 s
# deadline was missed on a shared 2-core machine); a dead process is noticed at once by other means.
HANDSHAKE_S = 120.0
# `wait` is asked after the shards are written; the process then has this long to finish importing TensorFlow
# (8-25 s measured) and write transform_fn (a few seconds).
TRANSFORM_FN_WAIT_S = 900.0
# After a lost connection, how long a client waits for the launcher to record the process's exit.
EXIT_NOTICE_S = 5.0
SOCKET_NAME = "transform_fn.sock"
EXIT_STATUS_NAME = "exit_status"  # beside the socket: the process's exit status, written by the launcher
# A Unix socket's path must fit in 108 bytes: the socket gets a short folder of its own.
_SOCKET_DIR_PREFIX = "shardsmith-tfp-"
_LOG = logging.getLogger("shardsmith")


@dataclass(frozen=True)
class TransformFnClient:
    """Has the process write transform_fn; picklable, so a Beam step can hold it. `start` hands over the
    request and returns at once; `wait` returns when that request is done (or raises with the process's
    one-line error). The build starts as soon as the vocabulary is known and waits after the shards.
    Every call has a deadline, and a process that died is reported as such, with its exit status, in seconds."""

    address: str
    authkey: bytes
    pid: int = 0

    def start(self, vocabulary, output_dir: str, temp_dir: str, lock=None) -> str:
        """Returns the request's key: the same request gives the same key, and is done once. `lock` (a
        LockGuard) is checked before transform_fn is written."""
        request = (vocabulary, output_dir, temp_dir, lock)
        key = hashlib.sha256(pickle.dumps(request)).hexdigest()
        self._ask(("start", key, request), HANDSHAKE_S)
        return key

    def wait(self, key: str) -> str:
        ok, value = self._ask(("wait", key), TRANSFORM_FN_WAIT_S)
        if not ok:
            raise RuntimeError(f"tf.transform could not write transform_fn: {value}")
        return value

    def __call__(self, vocabulary, output_dir: str, temp_dir: str, lock=None) -> str:
        return self.wait(self.start(vocabulary, output_dir, temp_dir, lock))

    def _ask(self, message, answer_within_s: float):
        with self._connect() as connection:
            try:
                connection.send(message)
                _set_io_deadline(connection, answer_within_s)
                return connection.recv()
            except BlockingIOError:  # the deadline of _set_io_deadline
                raise RuntimeError(
                    f"the tf.transform process (pid {self.pid}) gave no answer within {answer_within_s:.0f} s "
                    "although it still runs: the machine may be overloaded; run the same command again") from None
            except (EOFError, OSError):
                raise self._lost("closed the connection before it wrote transform_fn") from None

    def _connect(self) -> Connection:
        deadline = time.monotonic() + SOCKET_WAIT_S
        while True:
            died = self._died()
            if died is not None:
                raise died
            try:
                return self._handshake(_connected(self.address))
            except TimeoutError:
                raise RuntimeError(f"the tf.transform process (pid {self.pid}) accepted no connection within "
                                   f"{HANDSHAKE_S:.0f} s: it may be stuck; run the same command again") from None
            except (FileNotFoundError, ConnectionRefusedError):  # not listening yet, or gone: _died() tells
                if time.monotonic() > deadline:
                    raise self._lost(f"did not open its socket ({self.address}) within {SOCKET_WAIT_S:.0f} s") \
                        from None
                time.sleep(0.05)

    def _handshake(self, connection: Connection) -> Connection:
        try:
            _set_io_deadline(connection, HANDSHAKE_S)
            answer_challenge(connection, self.authkey)
            deliver_challenge(connection, self.authkey)
            return connection
        except BlockingIOError:
            connection.close()
            raise RuntimeError(f"the tf.transform process (pid {self.pid}) did not complete a handshake within "
                               f"{HANDSHAKE_S:.0f} s: it may be stuck; run the same command again") from None
        except BaseException:
            connection.close()
            raise

    def _died(self) -> RuntimeError | None:
        """The error that says the process died, if the launcher recorded its exit."""
        try:
            with open(os.path.join(os.path.dirname(self.address), EXIT_STATUS_NAME)) as f:
                status = int(f.read())
        except (OSError, ValueError):
            return None
        return RuntimeError(
            f"the tf.transform process (pid {self.pid}) died, {exit_described(status)}, before it wrote "
            "transform_fn; nothing was published: run the same command again (it replaces this unfinished build)"
            + ("; if it dies again, look for the out-of-memory killer in `dmesg`" if status == -signal.SIGKILL else ""))

    def _lost(self, what: str) -> RuntimeError:
        """The process's death if it died (the launcher records it within moments), else `what` happened."""
        deadline = time.monotonic() + EXIT_NOTICE_S
        while True:
            died = self._died()
            if died is not None or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        return died or RuntimeError(f"the tf.transform process (pid {self.pid}) {what}; run the same command again")


def _connected(address: str) -> Connection:
    """A blocking connection to `address`; connecting itself raises TimeoutError after HANDSHAKE_S."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as plain:
        plain.settimeout(HANDSHAKE_S)
        plain.connect(address)
        plain.setblocking(True)  # Connection reads and writes the descriptor directly, blocking
        return Connection(plain.detach())


def _set_io_deadline(connection: Connection, seconds: float) -> None:
    """Each read or write on `connection` raises BlockingIOError after `seconds` without progress (a kernel
    timeout on the socket: it covers the reads inside multiprocessing's handshake too)."""
    timeval = struct.pack("ll", int(seconds), int(seconds % 1 * 1e6))
    with socket.fromfd(connection.fileno(), socket.AF_UNIX, socket.SOCK_STREAM) as same_socket:  # a duplicate fd
        same_socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
        same_socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)


_RUNNING: set[subprocess.Popen] = set()


def kill_all() -> None:
    """Kills every tf.transform process this process runs (an interrupted build); their requests fail."""
    for process in list(_RUNNING):
        with contextlib.suppress(OSError):
            process.kill()


@contextlib.contextmanager
def transform_fn_process() -> Iterator[TransformFnClient]:
    """Starts the process; yields its client; stops the process and removes its socket on exit. The process's
    exit status is written beside its socket the moment it exits, so that a client fails at once if it dies."""
    socket_dir = tempfile.mkdtemp(prefix=_SOCKET_DIR_PREFIX)
    address = os.path.join(socket_dir, SOCKET_NAME)
    authkey = secrets.token_bytes(32)
    # process_group=0: a terminal's Ctrl-C reaches only the launcher, which then closes stdin (the exit signal).
    process = subprocess.Popen([sys.executable, "-m", "pipeline.running.transform_fn_process", address],
                               stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, process_group=0)
    _RUNNING.add(process)
    watcher = threading.Thread(target=_record_exit, args=(process, socket_dir), name="watch-tf.transform",
                               daemon=True)
    watcher.start()
    try:
        with contextlib.suppress(OSError):  # a process that died at once is reported by the client
            process.stdin.write(authkey.hex().encode() + b"\n")
            process.stdin.flush()
        yield TransformFnClient(address, authkey, process.pid)
    finally:
        with contextlib.suppress(OSError):
            process.stdin.close()  # the process's signal to exit
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        _RUNNING.discard(process)
        watcher.join(timeout=5)
        shutil.rmtree(socket_dir, ignore_errors=True)


def _record_exit(process: subprocess.Popen, socket_dir: str) -> None:
    status = process.wait()
    temp = os.path.join(socket_dir, f".{EXIT_STATUS_NAME}")
    with contextlib.suppress(OSError):
        with open(temp, "w") as f:
            f.write(str(status))
        os.replace(temp, os.path.join(socket_dir, EXIT_STATUS_NAME))


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
        if not done.wait(TRANSFORM_FN_WAIT_S):
            return False, f"transform_fn was not written within {TRANSFORM_FN_WAIT_S:.0f} s"
        return self._results[key]

    def work(self, write) -> None:
        """Does requests as they come, for as long as the process lives (it exits when the launcher goes)."""
        while True:
            key, request = self._queue.get()
            try:
                self._results[key] = (True, write(*request))
            except Exception as error:  # the launcher raises it in the build, with this text
                self._results[key] = (False, _one_line(error))
            self._done[key].set()


def _answer(connection: Connection, authkey: bytes, requests: _Requests) -> None:
    """One connection: the handshake and one request, each read and write under a deadline. A connection that
    fails its handshake (a wrong key, silence, garbage) is logged and closed; the process keeps serving."""
    with connection:
        try:
            _set_io_deadline(connection, HANDSHAKE_S)
            deliver_challenge(connection, authkey)
            answer_challenge(connection, authkey)
        except (OSError, EOFError, AuthenticationError) as error:
            _LOG.warning("shardsmith: the tf.transform process refused a connection that failed its handshake "
                         "(%s); it keeps serving", _one_line(error))
            return
        with contextlib.suppress(OSError, EOFError):  # a client that gave up: nothing to answer
            message = connection.recv()
            if message[0] == "start":
                requests.start(message[1], message[2])
                connection.send((True, message[1]))
            else:
                connection.send(requests.wait(message[1]))


def serve(address: str) -> None:
    """The process: listens first, then imports tensorflow-transform, then does requests as they come."""
    authkey = bytes.fromhex(sys.stdin.buffer.readline().decode().strip())
    if not authkey:  # the launcher went before it sent the key
        return
    threading.Thread(target=_exit_when_stdin_closes, name="watch-launcher", daemon=True).start()
    requests = _Requests()
    # No authkey on the Listener: its accept() would do the handshake in the accepting thread, where one silent
    # or wrong-key client stops every other (a wrong key raised out of the loop and ended it). Each
    # connection's handshake runs in that connection's thread instead.
    with Listener(address, family="AF_UNIX") as listener:
        threading.Thread(target=_accept, args=(listener, authkey, requests), name="accept", daemon=True).start()
        from pipeline.running.quiet_logs import quiet

        quiet()

        if not os.environ.get("SHARDSMITH_DEBUG"):  # as the launcher's local build: failures come back as text
            for name in ("apache_beam", "tensorflow_transform", "absl", "tensorflow"):
                logging.getLogger(name).setLevel(logging.CRITICAL)
        import tensorflow_transform.beam  # noqa: F401  (the seconds this process exists to spend early)

        from transforms.labels import write_transform_fn

        requests.work(write_transform_fn)


def _accept(listener: Listener, authkey: bytes, requests: _Requests) -> None:
    """Accepts connections for as long as the process lives; no error ends it."""
    while True:
        try:
            connection = listener.accept()
        except OSError as error:  # out of file descriptors, a connection reset before it was accepted
            _LOG.warning("shardsmith: the tf.transform process could not accept a connection (%s)", _one_line(error))
            time.sleep(0.1)
            continue
        threading.Thread(target=_answer, args=(connection, authkey, requests), daemon=True).start()


if __name__ == "__main__":
    serve(sys.argv[1])
