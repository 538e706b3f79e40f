"""The four cloud commands, each as the steps (argv lists) it runs: gcloud, docker, or shardsmith's own build.

Guarantees: the steps follow from the settings, the passed arguments and this checkout; nothing here runs
them (steps.py does). `image` builds from this checkout (its Dockerfile); `template` writes both specs of the one
image, the build's (pipeline/options/flex_template_metadata.json) and the compaction's beside it
(flex_template_compact_metadata.json, `compact_template_file`); `dataflow` and `run-template` accept only gs://
manifests and output folders, since Dataflow's workers cannot read the launching machine's files.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pipeline.cloud import UsageError
from pipeline.cloud.settings import Settings
from pipeline.cloud.template_parameters import (
    COMPACT_METADATA_FILE,
    METADATA_FILE,
    Template,
    is_compaction,
    parameters_flag,
    template_parameters,
)
from shardsmith.storage import is_cloud_storage

ROOT = Path(__file__).resolve().parents[2]  # the checkout: the Docker build context


def default_tag() -> str:
    """The image tag when none is set: the checkout's git commit (12 hex digits), else the package version."""
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
    except OSError:  # no git
        commit = ""
    if commit:
        return commit
    version = re.search(r'^version *= *"(.*)"', (ROOT / "pyproject.toml").read_text(), re.M)
    return version.group(1) if version else ""


def _no_arguments(passed: list[str], hint: str = "") -> None:
    if passed:
        raise UsageError(f"unexpected argument: {passed[0]}{hint}")


def _require_remote_paths(passed: list[str]) -> None:
    """Every --manifest and --output_dir among the passed arguments is a gs:// path."""
    for flag in ("manifest", "output_dir"):
        for i, arg in enumerate(passed):
            if arg.startswith(f"--{flag}="):
                value = arg.split("=", 1)[1]
            elif arg == f"--{flag}" and i + 1 < len(passed):
                value = passed[i + 1]
            else:
                continue
            if value and not is_cloud_storage(value):
                raise UsageError(f"--{flag} {value}: Dataflow workers read and write Cloud Storage only; use a gs:// "
                                 "path")


def image(s: Settings, passed: list[str], python: str) -> list[list[str]]:
    _no_arguments(passed)
    if s.builder == "cloudbuild":
        # Cloud Build builds the Dockerfile in the cloud and pushes the image; TensorFlow makes a big layer.
        return [["gcloud", "builds", "submit", str(ROOT), f"--project={s.project}", f"--region={s.region}",
                 f"--tag={s.image}", "--timeout=3600s", "--machine-type=e2-highcpu-8", "--ignore-file=.dockerignore"]]
    # Dataflow workers are x86-64: build for that platform whatever the local machine is. The registry login
    # edits ~/.docker/config.json: it comes after the build, and after the checks (image_checks) passed.
    login = [["gcloud", "auth", "configure-docker", _google_registry(s), "--quiet"]] if _google_registry(s) else []
    return [["docker", "build", "--platform=linux/amd64", f"--tag={s.image}", str(ROOT)], *login,
            ["docker", "push", s.image]]


def _google_registry(s: Settings) -> str:
    """The image's registry host if it is Google's (Artifact Registry, Container Registry), else ""."""
    host = s.image.split("/", 1)[0]
    return host if host.endswith((".pkg.dev", "gcr.io")) else ""


@dataclass(frozen=True)
class Check:
    """A command run (output captured) before a command's steps; it passes if it exits 0 and, with
    `needs_output`, prints something. `problem` is the line shown when it does not."""

    argv: list[str]
    problem: str
    needs_output: bool = False


def image_checks(s: Settings) -> list[Check]:
    """What `image --builder docker` needs before it changes anything: a Docker daemon, and for a Google registry
    an active gcloud account (`gcloud auth configure-docker` edits ~/.docker/config.json whether or not there is
    one). Cloud Build needs neither: gcloud itself refuses at once without an account."""
    if s.builder != "docker":
        return []
    checks = [Check(["docker", "info", "--format", "{{.ServerVersion}}"],
                    "no Docker daemon is reachable (start Docker, or use --builder cloudbuild)")]
    registry = _google_registry(s)
    if registry:
        checks.append(Check(["gcloud", "auth", "list", "--filter=status:ACTIVE", "--format=value(account)"],
                            f"gcloud has no active account, which pushing to {registry} needs: run `gcloud auth "
                            "login` first", needs_output=True))
    return checks


def dataflow(s: Settings, passed: list[str], python: str) -> list[list[str]]:
    _require_remote_paths(passed)
    build = [python, "-m", "pipeline", "build", *passed, "--runner=DataflowRunner", f"--project={s.project}",
             f"--region={s.region}", f"--temp_location={s.temp_location}",
             f"--staging_location={s.staging_location}", f"--sdk_container_image={s.image}",
             f"--job_name={s.job_name}"]
    build += _given((("--service_account_email=", s.service_account), ("--machine_type=", s.machine_type),
                     ("--num_workers=", s.num_workers), ("--max_num_workers=", s.max_workers),
                     ("--network=", s.network), ("--subnetwork=", s.subnetwork)))
    build += ["--no_use_public_ips"] if s.no_public_ips else []
    build += [f"--labels={label}" for label in s.label_list]
    _check_build(build[4:])
    return [build]


def _check_build(argv: list[str]) -> None:
    """The build's own argument checks (pipeline/options/check.py), for a dry run as for a real one."""
    from pipeline.options.check import check_build_arguments
    from shardsmith.errors import UsageError as BuildUsageError

    try:
        check_build_arguments(argv)
    except BuildUsageError as e:
        raise UsageError(f"build: {e}") from None


def _given(flags: tuple[tuple[str, str], ...]) -> list[str]:
    return [flag + value for flag, value in flags if value]


def environment_flags(s: Settings) -> list[str]:
    """Worker settings of `flex-template build` (the template's defaults) and `flex-template run`."""
    flags = _given((("--staging-location=", s.staging_location), ("--temp-location=", s.temp_location),
                    ("--service-account-email=", s.service_account), ("--worker-machine-type=", s.machine_type),
                    ("--num-workers=", s.num_workers), ("--max-workers=", s.max_workers),
                    ("--network=", s.network), ("--subnetwork=", s.subnetwork)))
    if s.no_public_ips:
        flags.append("--disable-public-ips")
    return flags + _given((("--additional-user-labels=", s.labels),))


def compact_template_file(template_file: str) -> str:
    """The compaction template's spec, beside the build's: shardsmith-TAG.json -> shardsmith-TAG-compact.json."""
    return template_file.removesuffix(".json") + "-compact.json"


def template(s: Settings, passed: list[str], python: str) -> list[list[str]]:
    _no_arguments(passed, " (parameters are given to run-template)")
    return [["gcloud", "dataflow", "flex-template", "build", spec, f"--project={s.project}", f"--image={s.image}",
             "--sdk-language=PYTHON", f"--metadata-file={metadata}", *environment_flags(s)]
            for spec, metadata in ((s.template_file, METADATA_FILE),
                                   (compact_template_file(s.template_file), COMPACT_METADATA_FILE))]


def run_template(s: Settings, passed: list[str], python: str) -> list[list[str]]:
    _require_remote_paths(passed)
    compaction = is_compaction(passed)
    items = template_parameters(passed, Template.load(compact=compaction))
    # The worker image is a Beam pipeline option that the launcher passes on, not a template parameter.
    items.append(f"sdk_container_image={s.image}")
    spec = compact_template_file(s.template_file) if compaction else s.template_file
    return [["gcloud", "dataflow", "flex-template", "run", s.job_name, f"--project={s.project}",
             f"--region={s.region}", f"--template-file-gcs-location={spec}", *environment_flags(s),
             parameters_flag(items)]]


STEPS: dict[str, Callable[[Settings, list[str], str], list[list[str]]]] = {
    "image": image, "dataflow": dataflow, "template": template, "run-template": run_template,
}
CHECKS: dict[str, Callable[[Settings], list[Check]]] = {"image": image_checks}
