"""Without Google Cloud credentials, a build that needs them (Dataflow, or gs:// paths outside an emulator) exits 2
in seconds with one line naming the fix, before Beam starts (it used to retry for 4 minutes and then blame the
manifest). The tests never reach the network: no credentials file, a HOME without gcloud's configuration, and
NO_GCE_CHECK=true so that no metadata server is asked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.checks.credentials import credentials_needed_for, credentials_problem

ROOT = Path(__file__).resolve().parents[3]
FIX = "gcloud auth application-default login"


def _no_credentials(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SHARDSMITH_", "GOOGLE_", "CLOUDSDK_", "GCE_", "STORAGE_EMULATOR_HOST"))}
    return env | {"HOME": str(home), "NO_GCE_CHECK": "true", "PYTHONPATH": str(ROOT)}


def _timed(argv: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    return done, time.monotonic() - started


def test_dataflow_without_credentials_exits_2_at_once_naming_the_fix(tmp_path):
    done, elapsed = _timed([sys.executable, "-m", "pipeline.cloud", f"--python={sys.executable}", "dataflow",
                            "--project", "my-proj", "--region", "us-central1", "--bucket", "my-bucket",
                            "--manifest", "gs://my-bucket/m.csv", "--output_dir", "gs://my-bucket/out",
                            "--name", "flowers"], _no_credentials(tmp_path))
    assert done.returncode == 2, done.stderr[-3000:]
    assert elapsed < 10, elapsed
    last = done.stderr.splitlines()[-1]
    assert last.startswith("shardsmith: error: no Google Cloud credentials") and FIX in last, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) <= 2  # the step's line, the error


def test_a_local_build_of_gs_paths_without_credentials_exits_2_at_once(tmp_path):
    out = tmp_path / "out"
    done, elapsed = _timed([sys.executable, "-m", "pipeline", "build", "--manifest", "gs://my-bucket/m.csv",
                            "--output_dir", str(out), "--name", "flowers"], _no_credentials(tmp_path))
    assert done.returncode == 2 and elapsed < 10, (elapsed, done.stderr[-3000:])
    assert done.stderr.count("\n") == 1 and FIX in done.stderr and "gs://my-bucket/m.csv" in done.stderr
    assert not out.exists()


def test_which_builds_need_credentials():
    local = dict(beam_args=[], manifests=("/data/m.csv",), output_dir="/out", temp_dir=None)
    assert credentials_needed_for(**local, environ={}) is None
    assert credentials_needed_for(**(local | {"manifests": ("/m.csv", "gs://b/m.csv")}), environ={}) == "gs://b/m.csv"
    assert credentials_needed_for(**(local | {"beam_args": ["--temp_location=gs://b/t"]}), environ={}) == "gs://b/t"
    assert credentials_needed_for(**(local | {"beam_args": ["--runner", "DataflowRunner"]}), environ={}) == \
           "--runner=DataflowRunner"
    # against a local storage emulator (tests, development) Beam's client reads and writes anonymously
    assert credentials_needed_for(**(local | {"output_dir": "gs://b/o"}), environ={"STORAGE_EMULATOR_HOST": "x:1"}) \
           is None


def test_credentials_found_in_gclouds_file_or_named_by_the_environment(tmp_path):
    environ = {"HOME": str(tmp_path), "NO_GCE_CHECK": "true"}
    assert FIX in credentials_problem("gs://b/o", environ)
    adc = tmp_path / "gcloud" / "application_default_credentials.json"
    adc.parent.mkdir()
    adc.write_text(json.dumps({"type": "authorized_user", "client_id": "id", "client_secret": "secret",
                               "refresh_token": "token"}))
    assert credentials_problem("gs://b/o", environ | {"CLOUDSDK_CONFIG": str(adc.parent)}) is None
    assert credentials_problem("gs://b/o", environ | {"GOOGLE_APPLICATION_CREDENTIALS": str(adc)}) is None
    missing = credentials_problem("gs://b/o", environ | {"GOOGLE_APPLICATION_CREDENTIALS": str(tmp_path / "key.json")})
    assert missing.startswith(f"GOOGLE_APPLICATION_CREDENTIALS names {tmp_path / 'key.json'}") and "not" in missing
    adc.write_text("{not json")
    broken = credentials_problem("gs://b/o", environ | {"CLOUDSDK_CONFIG": str(adc.parent)})
    assert broken.startswith(f"{adc} cannot be used") and FIX in broken


@pytest.mark.parametrize("value", ["true", "True"])
def test_no_gce_check_means_no_metadata_server_is_asked(tmp_path, value):
    started = time.monotonic()
    environ = {"HOME": str(tmp_path), "NO_GCE_CHECK": value, "GCE_METADATA_IP": "10.255.255.1"}
    assert credentials_problem("gs://b/o", environ)
    assert time.monotonic() - started < 0.5
