"""Shard writer processes never outlive the build that started them. Without this, `kill -9` of a build left
its writers running with parent 1, and they renamed shards into place after the build was gone.

Two guards: on Linux the kernel kills a writer when its parent dies (prctl PR_SET_PDEATHSIG, set first thing in
the writer); and on every platform a writer checks, right before renaming a shard into place, that its parent
is still the process that started it (PARENT_ENV), and kills itself if not. Outside a writer process
(PARENT_ENV unset: the runner's own process, a remote worker), every call here is a no-op.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

# Set by the shard writer pool in its workers: the pid of the build process that started them.
PARENT_ENV = "SHARDSMITH_WRITER_PARENT"
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent() -> None:
    """Asks Linux to SIGKILL this process when its parent dies, then dies at once if the parent is already
    gone (it may have died before the request). Elsewhere only the check before each rename guards."""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    exit_if_orphaned()


def exit_if_orphaned() -> None:
    """Kills this process with SIGKILL, as its parent's death would, if it is a writer whose parent is no longer
    the build that started it. Called right before a shard's final rename: a writer never renames after the
    build is gone (but for the instant between this check and the rename, which PR_SET_PDEATHSIG covers)."""
    parent = os.environ.get(PARENT_ENV)
    if parent and os.getppid() != int(parent):
        os.kill(os.getpid(), signal.SIGKILL)


def exit_described(status: int) -> str:
    """A child's exit status as a message says it: `exit code 1`, `killed by signal 9 (SIGKILL)`."""
    if status < 0:
        with contextlib.suppress(ValueError):
            return f"killed by signal {-status} ({signal.Signals(-status).name})"
        return f"killed by signal {-status}"
    return f"exit code {status}"
