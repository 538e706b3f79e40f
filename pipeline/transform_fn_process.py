"""tf.transform's step of a local build, in a process of its own started at launch.

Importing tensorflow-transform (and TensorFlow) takes about 10 s of CPU here, longer than writing 20,000 images.
A local build starts this process before it imports Beam: the import runs on a core the launcher leaves idle
while it imports Beam, reads the manifest and places rows, and transform_fn is written as soon as the label
vocabulary is known, beside the shard writers instead of after them. The launcher itself never imports
TensorFlow.

The stage (transforms/labels.py `AnalyzeLabels`) gets a `TransformFnClient`: a picklable callable that sends
(vocabulary, output_dir, temp_dir) over a local socket and returns when the process has written transform_fn,
or raises with the process's one-line error. The process serves any number of requests (a retried step sends
its request again; writing the same transform_fn again is harmless), and exits when the launcher closes its
standard input, which also happens if the launcher dies.
"""

from __future__ import annotations

import contextlib
import os
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
    """Writes transform_fn through the process; picklable, so a Beam step can hold it."""

    address: str
    authkey: bytes

    def __call__(self, vocabulary, output_dir: str, temp_dir: str) -> str:
        with self._connect() as connection:
            connection.send((vocabulary, output_dir, temp_dir))
            try:
                ok, value = connection.recv()
            except EOFError:
                raise RuntimeError("the tf.transform process exited before it wrote transform_fn") from None
        if not ok:
            raise RuntimeError(f"tf.transform could not write transform_fn: {value}")
        return value

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


@contextlib.contextmanager
def transform_fn_process() -> Iterator[TransformFnClient]:
    """Starts the process; yields its client; stops the process and removes its socket on exit."""
    socket_dir = tempfile.mkdtemp(prefix=_SOCKET_DIR_PREFIX)
    client = TransformFnClient(os.path.join(socket_dir, SOCKET_NAME), secrets.token_bytes(32))
    process = subprocess.Popen([sys.executable, "-m", "pipeline.transform_fn_process", client.address],
                               stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
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
        shutil.rmtree(socket_dir, ignore_errors=True)


def _exit_when_stdin_closes() -> None:
    sys.stdin.buffer.read()
    os._exit(0)


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def serve(address: str) -> None:
    """The process: listens first, then imports tensorflow-transform, then answers requests one at a time."""
    authkey = bytes.fromhex(sys.stdin.buffer.readline().decode().strip())
    threading.Thread(target=_exit_when_stdin_closes, name="watch-launcher", daemon=True).start()
    with Listener(address, family="AF_UNIX", authkey=authkey) as listener:
        from pipeline.quiet import quiet

        quiet()
        import logging

        if not os.environ.get("SHARDSMITH_DEBUG"):  # as the launcher's local build: failures come back as text
            for name in ("apache_beam", "tensorflow_transform", "absl", "tensorflow"):
                logging.getLogger(name).setLevel(logging.CRITICAL)
        import tensorflow_transform.beam  # noqa: F401  (the seconds this process exists to spend early)

        from transforms.labels import write_transform_fn

        while True:
            with listener.accept() as connection:
                vocabulary, output_dir, temp_dir = connection.recv()
                try:
                    reply = (True, write_transform_fn(vocabulary, output_dir, temp_dir))
                except Exception as error:  # the launcher raises it in the build, with this text
                    reply = (False, _one_line(error))
                connection.send(reply)


if __name__ == "__main__":
    serve(sys.argv[1])
