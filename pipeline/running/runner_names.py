"""What the runner named on the command line is, read from Beam's own flags before Beam is imported: whether it
is Beam's local runner (which shardsmith replaces by the FnApiRunner, pipeline/running/runner.py) and whether
its workers can see the launcher's disk. Beam-free, so that a wrong path is reported before seconds of imports."""

from __future__ import annotations

import os
import re

from shardsmith.errors import UsageError
from shardsmith.storage import is_remote

# Beam's in-process runners, by their short or fully qualified names (the last dotted part is compared).
LOCAL_RUNNERS = frozenset({"", "direct", "directrunner", "switchingdirectrunner", "fnapirunner"})
# Runners whose workers are other machines: they never see the launcher's files.
REMOTE_RUNNERS = frozenset({"dataflow", "dataflowrunner", "testdataflowrunner"})
# Portable runners: their SDK workers run where --environment_type puts them. When it is not given, Beam 2.77
# picks LOOPBACK (the launcher's own process) for Prism and for Flink and Spark on a local master, else DOCKER.
PORTABLE_RUNNERS = frozenset({"portablerunner", "flinkrunner", "sparkrunner", "prismrunner"})
LOCAL_FLINK_MASTERS = frozenset({"[auto]", "[local]"})
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]"})
# Environments whose SDK harness runs on the launcher's machine and file system.
SAME_MACHINE_ENVIRONMENTS = frozenset({"loopback", "external", "process", "embedded", "beam:env:embedded:v1",
                                       "beam:env:loopback:v1"})


def beam_flag(beam_args: list[str], name: str) -> str | None:
    """The last value given to Beam flag `--name` (`--name=V` or `--name V`), or None; a bare switch is ''."""
    value = None
    for i, arg in enumerate(beam_args):
        if arg == "--":
            break
        if arg.startswith(f"--{name}="):
            value = arg.split("=", 1)[1]
        elif arg == f"--{name}":
            following = beam_args[i + 1] if i + 1 < len(beam_args) else ""
            value = "" if following.startswith("--") else following
    return value


def runner_name(runner: object) -> str:
    """A runner flag's value as its short lower-case name: `apache_beam.runners.direct.direct_runner.DirectRunner`
    and `DirectRunner` are both `directrunner`."""
    if runner is None:
        return ""
    if not isinstance(runner, str):
        runner = type(runner).__name__ if not isinstance(runner, type) else runner.__name__
    return runner.rsplit(".", 1)[-1].strip().lower()


def is_local_runner(runner: object) -> bool:
    return runner_name(runner) in LOCAL_RUNNERS


def sees_launcher_disk(beam_args: list[str]) -> bool:
    """Whether the workers of the runner these flags name read and write the launcher's local files: Beam's local
    runner, or a portable runner whose job service is on this machine and whose SDK harness is not in a container.
    Dataflow's workers, a DOCKER environment (PortableRunner's default) and a job service elsewhere do not."""
    name = runner_name(beam_flag(beam_args, "runner"))
    if name in LOCAL_RUNNERS:
        return True
    if name in REMOTE_RUNNERS:
        return False
    environment = (beam_flag(beam_args, "environment_type") or _default_environment(name, beam_args)).lower()
    if name in PORTABLE_RUNNERS and environment not in SAME_MACHINE_ENVIRONMENTS:
        return False
    endpoint = beam_flag(beam_args, "job_endpoint")
    if endpoint and endpoint != "embed" and _host(endpoint) not in LOCAL_HOSTS:
        return False
    return environment != "docker"


def _default_environment(name: str, beam_args: list[str]) -> str:
    """The environment Beam gives runner `name` when --environment_type is not given (its default_environment)."""
    if name == "prismrunner":
        return "loopback"
    if name == "flinkrunner" and (beam_flag(beam_args, "flink_master") or "[auto]") in LOCAL_FLINK_MASTERS:
        return "loopback"
    spark_master = beam_flag(beam_args, "spark_master_url") or "local[4]"
    if name == "sparkrunner" and re.fullmatch(r"local(\[.+\])?", spark_master):
        return "loopback"
    return "docker" if name in PORTABLE_RUNNERS else ""


def _host(endpoint: str) -> str:
    address = endpoint.split("://", 1)[-1]
    return address[: address.index("]") + 1] if address.startswith("[") else address.partition(":")[0]


def absolute_beam_paths(beam_args: list[str]) -> list[str]:
    """Beam's flags with a local --temp_location made absolute against the launcher's working directory (a
    portable runner's workers have their own)."""
    out = []
    for i, arg in enumerate(beam_args):
        if arg.startswith("--temp_location="):
            arg = "--temp_location=" + _absolute(arg.split("=", 1)[1])
        elif i and beam_args[i - 1] == "--temp_location" and not arg.startswith("--"):
            arg = _absolute(arg)
        out.append(arg)
    return out


def _absolute(path: str) -> str:
    return path if not path or is_remote(path) else os.path.abspath(path)


def check_paths_for_runner(beam_args: list[str], manifests: tuple[str, ...], output_dir: str,
                           temp_dir: str | None) -> None:
    """A runner whose workers cannot see the launcher's disk needs every path they use to be a URI they can reach
    (gs://...): a local manifest, output or scratch folder is a UsageError naming the flag. Such a runner also
    needs a scratch folder (--temp_dir or --temp_location) for the job's files and tf.transform's (--feature)."""
    if sees_launcher_disk(beam_args):
        return
    why = ("the workers of this runner (--runner=" + (beam_flag(beam_args, "runner") or "") +
           ") cannot see this machine's disk; give a gs:// URI")
    for manifest in manifests:
        if not is_remote(manifest):
            raise UsageError(f"--manifest {manifest} is a local path: {why}")
    if not is_remote(output_dir):
        raise UsageError(f"--output_dir {output_dir} is a local path: {why}")
    # --temp_dir is taken as given: it is the user's explicit choice (a folder mounted on every worker, say).
    temp_location = beam_flag(beam_args, "temp_location")
    if temp_location and not is_remote(temp_location):
        raise UsageError(f"--temp_location {temp_location} is a local path: {why}")
    if not temp_dir and not temp_location:
        raise UsageError(f"--temp_location (or --temp_dir) is needed: {why} for the job's scratch files")
