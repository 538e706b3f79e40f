"""The one error every shardsmith command reports as one line and exit status 2, without a traceback."""


class UsageError(Exception):
    """A problem with the command line, the inputs or the environment, reported as one line."""
