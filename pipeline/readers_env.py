"""`bash launch.sh readers-env`: a virtualenv with the readers alone (.venv-readers, or SHARDSMITH_READERS_VENV).

shardsmith's own dependencies are the build stack (Beam, TensorFlow, tf.transform: about 4 GB). The readers
(`shardsmith.records`, `shardsmith.torch`, `shardsmith.grain`'s source) need only pyproject.toml's `readers` extra,
and `shardsmith.torch` its `torch` extra; so this installs those extras' packages, then shardsmith itself with
`--no-deps`. Standard library only: it runs on the system Python, before any virtualenv exists.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
READER_EXTRAS = ("readers", "torch")


def reader_packages(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """The requirements of pyproject.toml's READER_EXTRAS, as written there."""
    extras = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]
    return [requirement for extra in READER_EXTRAS for requirement in extras[extra]]


def main(argv: list[str] | None = None) -> int:
    if argv if argv is not None else sys.argv[1:]:
        print("launch.sh: readers-env takes no arguments (SHARDSMITH_READERS_VENV sets where it goes)",
              file=sys.stderr)
        return 2
    folder = Path(os.environ.get("SHARDSMITH_READERS_VENV") or ROOT / ".venv-readers")
    python = folder / "bin" / "python"
    if not python.exists():
        print(f"launch.sh: creating {folder}", file=sys.stderr, flush=True)
        venv.create(folder, with_pip=True)
        (folder / ".gitignore").write_text("*\n")  # keeps git, ruff and gcloud builds out of it
    packages = reader_packages()
    print(f"launch.sh: installing {' '.join(packages)}, then shardsmith without its dependencies, into {folder}",
          file=sys.stderr, flush=True)
    for arguments in (["--upgrade", "pip"], packages, ["--no-deps", "-e", str(ROOT)]):
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", *arguments], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
