"""Quiet by default: the `shardsmith` command keeps TensorFlow's C++ log lines (CUDA drivers not found,
cuInit failed, oneDNN is on, absl's "before InitializeLog" notice, per-image PNG warnings) off the terminal.

`quiet()` runs first in `main`, before anything imports TensorFlow: it sets TF_CPP_MIN_LOG_LEVEL=3 (read by
TensorFlow when it loads, and inherited by every process the build starts) and makes the process's first
`import tensorflow`, whichever thread and module it comes from, drop the lines TensorFlow's libraries print
while loading, which no setting reaches. Python warnings and shardsmith's own log lines are untouched.
SHARDSMITH_VERBOSE=1 keeps everything (a --verbose flag can set it before calling `quiet`).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

from shardsmith.tensorflow_import import VERBOSE_ENV, exec_quietly, quiet_native_logs, verbose

__all__ = ["VERBOSE_ENV", "quiet"]


class _QuietLoader(importlib.abc.Loader):
    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        exec_quietly(lambda: self._loader.exec_module(module))


class _QuietTensorFlowImport(importlib.abc.MetaPathFinder):
    """Finds `tensorflow` as the path finder does, with its loader run through `exec_quietly`; once."""

    def find_spec(self, name, path, target=None):
        if name != "tensorflow":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _QuietLoader(spec.loader)
        return spec


def quiet() -> None:
    """Quiets TensorFlow's C++ logging for this process and its children unless SHARDSMITH_VERBOSE is set."""
    quiet_native_logs()
    if verbose() or "tensorflow" in sys.modules or any(
            isinstance(finder, _QuietTensorFlowImport) for finder in sys.meta_path):
        return
    sys.meta_path.insert(0, _QuietTensorFlowImport())
