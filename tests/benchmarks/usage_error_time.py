"""How long `shardsmith build` takes to report a missing manifest, in a fresh process, and whether it imported
Beam or TensorFlow to do it (docs/building.md, "Usage errors are fast"):

    PYTHONPATH=. python tests/benchmarks/usage_error_time.py

Prints wall and CPU seconds (CPU is the steadier figure on a shared machine) of the whole process, imports
included.
"""

from __future__ import annotations

import resource
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    started = time.perf_counter()
    from pipeline import cli

    with tempfile.TemporaryDirectory() as folder:
        status = cli.main(["build", "--manifest", str(Path(folder) / "missing.csv"), "--output_dir",
                           str(Path(folder) / "out"), "--name", "n"])
    wall = time.perf_counter() - started
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(f"exit status {status}; apache_beam imported: {'apache_beam' in sys.modules}; tensorflow imported: "
          f"{'tensorflow' in sys.modules}; {wall:.2f} s wall, {usage.ru_utime + usage.ru_stime:.2f} s CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
