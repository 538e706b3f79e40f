"""What a torch-only team installs and waits for (README, "With PyTorch"). Not run by CI.

    bash launch.sh readers-env && python tests/benchmarks/reader_install.py --rounds 3

Prints the size on disk of .venv-readers (the readers: shardsmith without its dependencies, then pyproject.toml's
`readers` and `torch` extras) and of .venv (everything), torch's share of the first, and the wall time of a fresh
`python -c "import shardsmith, shardsmith.torch"` in each, alternating, every run and the medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENVS = {"readers": ROOT / ".venv-readers", "full": ROOT / ".venv"}


def megabytes(folder: Path) -> float:
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                total += os.stat(path).st_size
    return total / 1e6


def import_seconds(venv: Path) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    started = time.perf_counter()
    subprocess.run([str(venv / "bin" / "python"), "-c", "import shardsmith, shardsmith.torch"], check=True, env=env,
                   cwd="/")
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    for name, venv in VENVS.items():
        if not (venv / "bin" / "python").exists():
            command = "readers-env" if name == "readers" else "install"
            raise SystemExit(f"no {venv}: make it first (bash launch.sh {command})")
        print(f"{name}: {venv.name} {megabytes(venv):,.0f} MB", flush=True)
    torch = next((VENVS["readers"] / "lib").glob("python3*/site-packages/torch"))
    print(f"readers: torch {megabytes(torch):,.0f} MB of it", flush=True)
    times: dict[str, list[float]] = {name: [] for name in VENVS}
    for round_number in range(args.rounds):
        for name in (list(VENVS) if round_number % 2 == 0 else list(reversed(VENVS))):
            times[name].append(import_seconds(VENVS[name]))
            print(f"round {round_number + 1} {name}: import shardsmith, shardsmith.torch {times[name][-1]:.2f} s",
                  flush=True)
    print("medians: " + ", ".join(f"{name} {statistics.median(t):.2f} s" for name, t in times.items()))


if __name__ == "__main__":
    main()
