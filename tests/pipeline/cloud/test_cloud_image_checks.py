"""`bash launch.sh image --builder docker` checks what can be checked (a reachable Docker daemon, an active gcloud
account for a Google registry) before it changes anything: without them it exits 2 with one line and the user's
~/.docker/config.json is not touched. Google Cloud cannot be reached from the tests, so `docker` and `gcloud` are
stand-ins on PATH that log their arguments and answer as a machine without a daemon or an account does."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
IMAGE = "europe-west4-docker.pkg.dev/my-project/shardsmith/shardsmith:abc123"
NO_DAEMON = "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?"


def _stand_ins(bin_dir: Path, log: Path, daemon: bool, account: str) -> None:
    """`docker` and `gcloud` that append their arguments to `log`; `gcloud auth configure-docker` edits
    ~/.docker/config.json as the real one does."""
    bin_dir.mkdir()
    q = shlex.quote
    (bin_dir / "docker").write_text(
        "#!/bin/sh\n"
        f'echo "docker $*" >> {q(str(log))}\n'
        'if [ "$1" = info ]; then\n'
        + (f"  echo {q('27.0.1')}; exit 0\n" if daemon else f"  echo {q(NO_DAEMON)} >&2; exit 1\n")
        + "fi\nexit 0\n")
    (bin_dir / "gcloud").write_text(
        "#!/bin/sh\n"
        f'echo "gcloud $*" >> {q(str(log))}\n'
        'if [ "$1 $2" = "auth list" ]; then\n'
        + (f"  echo {q(account)}\n" if account else "") + "  exit 0\n"
        "fi\n"
        'if [ "$1 $2" = "auth configure-docker" ]; then\n'
        '  mkdir -p "$HOME/.docker" && echo \'{"credHelpers": {"x": "gcloud"}}\' > "$HOME/.docker/config.json"\n'
        "fi\nexit 0\n")
    for program in ("docker", "gcloud"):
        (bin_dir / program).chmod(0o755)


def _image(tmp_path: Path, daemon: bool, account: str):
    home, log = tmp_path / "home", tmp_path / "log"
    home.mkdir()
    _stand_ins(tmp_path / "bin", log, daemon, account)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHARDSMITH_", "CLOUDSDK_", "DOCKER_"))}
    env |= {"HOME": str(home), "PATH": f"{tmp_path / 'bin'}{os.pathsep}{env['PATH']}",
            "SHARDSMITH_VENV": str(tmp_path / "no-venv")}
    done = subprocess.run(["bash", str(ROOT / "launch.sh"), "image", "--builder", "docker", "--image", IMAGE],
                          env=env, capture_output=True, text=True, timeout=60, cwd=ROOT)
    calls = log.read_text().splitlines() if log.exists() else []
    return done, calls, home / ".docker" / "config.json"


def test_image_without_a_docker_daemon_changes_nothing(tmp_path):
    done, calls, docker_config = _image(tmp_path, daemon=False, account="me@example.com")
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-1].startswith("launch.sh: image: no Docker daemon is reachable"), done.stderr
    assert "Is the docker daemon running?" in done.stderr and len(done.stderr.splitlines()) == 1
    assert not docker_config.exists()
    assert not any("configure-docker" in call or call.startswith(("docker build", "docker push")) for call in calls)


def test_image_without_a_gcloud_account_changes_nothing(tmp_path):
    done, calls, docker_config = _image(tmp_path, daemon=True, account="")
    assert done.returncode == 2, done.stderr
    assert done.stderr == ("launch.sh: image: gcloud has no active account, which pushing to "
                           "europe-west4-docker.pkg.dev needs: run `gcloud auth login` first\n")
    assert not docker_config.exists()
    assert not any("configure-docker" in call or call.startswith(("docker build", "docker push")) for call in calls)


def test_image_with_a_daemon_and_an_account_builds_then_configures_docker_then_pushes(tmp_path):
    done, calls, docker_config = _image(tmp_path, daemon=True, account="me@example.com")
    assert done.returncode == 0, done.stderr
    steps = [call.split()[:3] for call in calls if not call.startswith(("docker info", "gcloud auth list"))]
    assert steps == [["docker", "build", "--platform=linux/amd64"],
                     ["gcloud", "auth", "configure-docker"], ["docker", "push", IMAGE]]
    assert docker_config.exists()
