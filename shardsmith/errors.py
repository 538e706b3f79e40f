"""The one error every shardsmith command reports as one line and exit status 2, without a traceback."""

# A UsageError met on a worker (a manifest that changed since the launcher checked it) reaches the launcher inside
# the runner's own error text; this prefix marks the line to report.
WORKER_USAGE_MARKER = "shardsmith usage error: "
# Where a runner's text goes on after the message it wraps.
_RUNNER_CONTEXT = ("\n", " [while running", "\" [while running", "' [while running")


class UsageError(Exception):
    """A problem with the command line, the inputs or the environment, reported as one line."""


class WorkerUsageError(RuntimeError):
    """A UsageError raised inside the pipeline: it fails the job, and the CLI reports it as a UsageError."""

    def __init__(self, message: str):
        super().__init__(message if message.startswith(WORKER_USAGE_MARKER) else WORKER_USAGE_MARKER + message)


def worker_usage_error_in(text: str) -> str | None:
    """The message of a WorkerUsageError somewhere in a runner's error text, or None."""
    if WORKER_USAGE_MARKER not in text:
        return None
    message = text[text.index(WORKER_USAGE_MARKER) + len(WORKER_USAGE_MARKER):]
    for end in _RUNNER_CONTEXT:
        message = message.split(end, 1)[0]
    return message.strip()
