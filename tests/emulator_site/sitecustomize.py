"""Imported at start-up by every Python process a test starts while Beam is pointed at a storage emulator
(conftest.py's _beam_on_emulator puts this folder on PYTHONPATH): the shard writer processes a build starts.

It settles Beam's credential cache as "none found" (anonymous), as _beam_on_emulator does in the test process.
Without it each such process retries google.auth.default() with backoff for about 22 s before it connects
anonymously to the same emulator: the same outcome, reached 22 s later.
"""

import os

if os.environ.get("STORAGE_EMULATOR_HOST"):
    try:
        from apache_beam.internal.gcp import auth
    except ImportError:  # a process of another interpreter, without Beam
        pass
    else:
        auth._Credentials._credentials_init = True
        auth._Credentials._credentials = None
