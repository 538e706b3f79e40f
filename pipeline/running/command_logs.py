"""The log of a build or compaction on the launcher: shardsmith's lines on stderr, the inputs' unprintable
characters escaped, Beam's and TensorFlow's chatter off on a local runner (unless SHARDSMITH_DEBUG=1, which also
keeps the traceback of a failure: pipeline/cli.py)."""

from __future__ import annotations

import logging
import os

DEBUG_ENV = "SHARDSMITH_DEBUG"
LOG_FORMAT = "%(asctime)s %(levelname)s %(message)s"


class ShownFormatter(logging.Formatter):
    """Log lines with the inputs' unprintable characters escaped (shardsmith/printable.py): a build logs
    labels, URIs and error details."""

    def format(self, record: logging.LogRecord) -> str:
        from shardsmith.printable import shown

        return shown(super().format(record), keep_newlines=True)


class StderrHandler(logging.StreamHandler):
    """The log's handler on stderr. A line logged after that stream was closed (by a thread still running when the
    program's caller closed it: a writer pool's job thread warning about a killed writer) is dropped: there is no
    one to read it, and logging's default would print a "--- Logging error ---" traceback on whatever stderr is
    then."""

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        if getattr(self.stream, "closed", False):
            return
        super().handleError(record)


def configure_logging(local: bool) -> None:
    """shardsmith's log on stderr; on a local runner, Beam's, tf.transform's, absl's and TensorFlow's loggers off
    (the command reports a failure in one line instead) unless SHARDSMITH_DEBUG is set."""
    handler = StderrHandler()
    handler.setFormatter(ShownFormatter(LOG_FORMAT))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    if local and not os.environ.get(DEBUG_ENV):
        # The local runner logs every bundle at INFO and a failing DoFn's traceback at ERROR; `main` reports
        # failures in one line instead. On a remote runner Beam's INFO lines are kept: they carry the job id
        # and console URL that schedulers (Airflow's Beam operator) look for.
        for name in ("apache_beam", "tensorflow_transform", "absl", "tensorflow"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
