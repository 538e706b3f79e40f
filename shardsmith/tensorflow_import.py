"""Importing TensorFlow quietly: its C++ log lines (CUDA drivers not found, cuInit failed, oneDNN is on, absl's
"before InitializeLog" notice, per-image PNG warnings) stay off the terminal unless SHARDSMITH_VERBOSE is set.
Used by `load()` and by the `shardsmith` command (pipeline/running/quiet_logs.py). Python warnings are never hidden.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Callable

VERBOSE_ENV = "SHARDSMITH_VERBOSE"  # set (to anything but "" or "0") to keep TensorFlow's C++ log lines
# The lines TensorFlow's shared libraries print while they load, before TF_CPP_MIN_LOG_LEVEL is read (absl's
# "before InitializeLog" notice, oneDNN's and the CUDA stub's notes, the CPU-instructions note): dropped from
# what the import wrote to stderr. Everything else it wrote (Python warnings, a FATAL line) is written back.
_IMPORT_NOISE = re.compile(r"WARNING: All log messages before absl::InitializeLog\(\)|[IWE]\d{4} [\d:. ]+\d+ \S+:\d+\] "
                           r"|To enable the following instructions: ")


def verbose() -> bool:
    return os.environ.get(VERBOSE_ENV, "") not in ("", "0")


def quiet_native_logs() -> None:
    """Unless SHARDSMITH_VERBOSE is set, asks TensorFlow's C++ code (and the child processes this one starts)
    to log nothing below FATAL: its notes about CUDA drivers, cuInit, oneDNN and per-image PNG warnings go.
    A TF_CPP_MIN_LOG_LEVEL the user set is kept. Read by TensorFlow once, when it is imported: no effect after."""
    if not verbose():
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def exec_quietly(run: Callable[[], object]):
    """`run()` (importing TensorFlow) with file descriptor 2 sent to a temporary file; what it wrote there is
    written back afterwards, less TensorFlow's load-time log lines. With SHARDSMITH_VERBOSE set, just `run()`."""
    if verbose():
        return run()
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            return run()
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            kept = [line for line in captured.read().decode(errors="replace").splitlines(keepends=True)
                    if not _IMPORT_NOISE.match(line)]
            if kept:
                os.write(2, "".join(kept).encode())


def import_tensorflow():
    """`tensorflow`, imported quietly (see quiet_native_logs and exec_quietly) when this is the first import."""
    quiet_native_logs()
    if "tensorflow" not in sys.modules:
        import importlib

        exec_quietly(lambda: importlib.import_module("tensorflow"))
    import tensorflow as tf

    return tf
