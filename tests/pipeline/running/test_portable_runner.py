"""The remote path, on this machine: Beam's portable runner (the Fn API that Dataflow's workers speak) with its
local job service and an external SDK worker pool, each a separate process, the pool in a working directory that
is not the launcher's. The launcher prints the same summary as a local build (read back from the output folder),
`shardsmith verify` passes, the shard files are byte-identical to the default runner's, and a relative
--output_dir means the folder the user named, not one under the workers' working directory."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SERVICE_START_TIMEOUT_S = 120  # Beam's imports on a busy machine take tens of seconds
COUNTS = {"cat": {"train": 10, "validation": 2, "test": 2}, "dog": {"train": 10, "validation": 2, "test": 2}}
NUM_SHARDS = "train=2,validation=1,test=1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_listening(port: int, process: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + SERVICE_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with status {process.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise RuntimeError(f"{what} did not listen on port {port} within {SERVICE_START_TIMEOUT_S} s")


@pytest.fixture(scope="module")
def portable(tmp_path_factory, stopped):
    """A local job service and an external worker pool on free 127.0.0.1 ports; yields the runner's flags and
    the pool's working directory; stops both at the end."""
    job_port, pool_port = _free_port(), _free_port()
    worker_cwd = tmp_path_factory.mktemp("worker_cwd")
    env = dict(os.environ)
    # The pool starts SDK workers as a bare `python`: this interpreter's folder first on PATH, and this tree
    # importable (the launcher's working directory is not the pool's).
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(ROOT), env.get("PYTHONPATH", "")] if p)
    logs = tmp_path_factory.mktemp("portable_logs")
    processes = []
    try:
        for module, flag, port, name in (
            ("apache_beam.runners.portability.local_job_service_main", "--port", job_port, "job service"),
            ("apache_beam.runners.worker.worker_pool_main", "--service_port", pool_port, "worker pool"),
        ):
            log = (logs / f"{name.replace(' ', '_')}.log").open("wb")
            process = subprocess.Popen([sys.executable, "-m", module, flag, str(port)], cwd=worker_cwd, env=env,
                                       stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            processes.append((process, log))
            _wait_listening(port, process, f"Beam's {name}")
        yield {"flags": ["--runner=PortableRunner", f"--job_endpoint=localhost:{job_port}",
                         "--environment_type=EXTERNAL", f"--environment_config=localhost:{pool_port}"],
               "worker_cwd": worker_cwd}
    finally:
        for process, log in processes:
            stopped(process, 20)
            log.close()


@pytest.fixture(scope="module")
def images(tmp_path_factory, image_set_factory):
    return image_set_factory(tmp_path_factory.mktemp("portable_images"), COUNTS)


def test_a_portable_build_reports_verifies_and_matches_the_default_runner(portable, images, shardsmith, checks,
                                                                           tmp_path):
    local_out, portable_out = tmp_path / "local", tmp_path / "portable"
    common = ["build", "--manifest", images.manifest, "--name", "pets", "--num_shards", NUM_SHARDS]
    assert shardsmith(*common, "--output_dir", local_out).code == 0

    result = shardsmith(*common, "--output_dir", portable_out, *portable["flags"])
    assert result.code == 0, result.err
    assert "shardsmith: built 'pets'" in result.out and f"output     {portable_out}" in result.out
    assert "train            20 examples in 2 shard(s)" in result.out

    verified = shardsmith("verify", portable_out)
    assert verified.code == 0, verified.out + verified.err
    local_shards, portable_shards = checks.shard_bytes(local_out), checks.shard_bytes(portable_out)
    assert len(local_shards) == 2 * 4 and portable_shards == local_shards  # 4 shards, each with its index file
    assert not any(portable["worker_cwd"].iterdir()), "the workers wrote into their own working directory"


def test_a_relative_output_dir_lands_under_the_launchers_working_directory(portable, images, shardsmith, tmp_path,
                                                                           monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = shardsmith("build", "--manifest", images.manifest, "--name", "pets", "--num_shards", NUM_SHARDS,
                        "--output_dir", "relative/out", *portable["flags"])
    assert result.code == 0, result.err
    assert f"output     {tmp_path / 'relative' / 'out'}" in result.out
    assert (tmp_path / "relative" / "out" / "metadata.json").exists()
    assert not any(portable["worker_cwd"].iterdir()), "the workers wrote into their own working directory"
