"""The settings of the cloud commands: one table, the command line that sets them, and their resolution.

A setting's value is its flag's, else the environment variable SHARDSMITH_<KEY>'s, else the --config file's
line <KEY>=VALUE (or SHARDSMITH_<KEY>=VALUE); an empty value counts as not given. Flags are spelled with
underscores or dashes, as `--flag VALUE` or `--flag=VALUE`; Beam's names for the same settings work too.
Every argument that is not a setting, --config, --dry-run or --help is passed on, in order (after `--`, all are).
Guarantees: `resolve` names every missing required setting in one error, and returns only settings that passed
the checks below (job name, gs:// locations, worker counts, builder, labels).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from pipeline.cloud import UsageError


@dataclass(frozen=True)
class Setting:
    key: str  # SHARDSMITH_<KEY> in the environment, <KEY> in the config file, `key.lower()` in Settings
    flags: tuple[str, ...]  # the first is shardsmith's name; the others are Beam's names for it
    metavar: str  # "" for a switch (a flag without a value, or with =true/=false)
    default: str  # as the help shows it


SETTINGS = (
    Setting("PROJECT", ("project",), "P", "required"),
    Setting("REGION", ("region",), "R", "required (e.g. us-central1)"),
    Setting("BUCKET", ("bucket",), "B", "required, unless every gs:// location below is given"),
    Setting("TEMP_LOCATION", ("temp_location",), "GS", "gs://B/shardsmith/temp"),
    Setting("STAGING_LOCATION", ("staging_location",), "GS", "gs://B/shardsmith/staging"),
    Setting("TEMPLATE_FILE", ("template_file",), "GS", "gs://B/shardsmith/templates/shardsmith-TAG.json"),
    Setting("IMAGE", ("image", "sdk_container_image"), "IMAGE", "R-docker.pkg.dev/P/REPOSITORY/shardsmith:TAG"),
    Setting("REPOSITORY", ("repository",), "NAME", "shardsmith (an Artifact Registry Docker repository)"),
    Setting("IMAGE_TAG", ("tag", "image_tag"), "TAG", "the git commit (12 hex digits), else the package version"),
    Setting("BUILDER", ("builder",), "KIND", "cloudbuild (gcloud builds submit) or docker"),
    Setting("SERVICE_ACCOUNT", ("service_account", "service_account_email"), "SA",
            "Dataflow's default (the Compute Engine default account)"),
    Setting("MACHINE_TYPE", ("machine_type", "worker_machine_type"), "TYPE", "Dataflow's default"),
    Setting("MAX_WORKERS", ("max_workers", "max_num_workers"), "N", "Dataflow's default (the autoscaling ceiling)"),
    Setting("NUM_WORKERS", ("num_workers",), "N", "Dataflow's default (workers at start)"),
    Setting("NETWORK", ("network",), "NET", "Dataflow's default"),
    Setting("SUBNETWORK", ("subnetwork",), "SUB", "Dataflow's default (regions/R/subnetworks/NAME or a URL)"),
    Setting("NO_PUBLIC_IPS", ("no_public_ips", "no_use_public_ips"), "",
            "false (true: the subnetwork needs Private Google Access)"),
    Setting("JOB_NAME", ("job_name",), "NAME", "shardsmith-YYYYMMDD-HHMMSS (UTC)"),
    Setting("LABELS", ("labels",), "K=V,K2=V2", "none (Dataflow job labels); repeat the flag to add more"),
)
KEYS = tuple(setting.key for setting in SETTINGS)
_BY_FLAG = {flag: setting for setting in SETTINGS for flag in setting.flags}


@dataclass
class CommandLine:
    flags: dict[str, str] = field(default_factory=dict)  # KEY -> the value its flag gave
    passed: list[str] = field(default_factory=list)  # everything else, in order
    config: str = ""
    dry_run: bool = False
    help: bool = False


def is_true(value: str) -> bool:
    return value.lower() in ("true", "1", "yes")


def parse_command_line(args: list[str]) -> CommandLine:
    """Reads the settings' flags, --config, --dry-run and --help out of `args`; stops at --help."""
    line = CommandLine()
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg in ("-h", "--help"):
            line.help = True
            return line
        if arg in ("--dry-run", "--dry_run"):
            line.dry_run = True
            continue
        if arg == "--":
            line.passed += args[i:]
            break
        if not arg.startswith("--"):
            line.passed.append(arg)
            continue
        name, has_value, value = arg[2:].partition("=")
        flag = name.replace("-", "_")
        setting = _BY_FLAG.get(flag)
        if setting is None and flag != "config":
            line.passed.append(arg)
            continue
        if setting is not None and not setting.metavar:  # a switch
            value = "true" if not has_value or is_true(value) else "false"
        elif not has_value:
            if i == len(args):
                raise UsageError("--config needs a file" if setting is None else f"--{name} needs a value")
            value = args[i]
            i += 1
        if setting is None:
            line.config = value
        elif setting.key == "LABELS" and line.flags.get("LABELS"):
            line.flags["LABELS"] += "," + value
        else:
            line.flags[setting.key] = value
    return line


def gather(flags: Mapping[str, str], environ: Mapping[str, str], config: Mapping[str, str]) -> dict[str, str]:
    """Each setting's value: the flag's, else SHARDSMITH_<KEY>'s, else the config file's; "" when none."""
    return {key: flags.get(key) or environ.get(f"SHARDSMITH_{key}") or config.get(key) or "" for key in KEYS}


@dataclass(frozen=True)
class Settings:
    """Resolved settings; "" is a setting left to Dataflow's default (or not needed by this command)."""

    project: str
    region: str
    bucket: str
    temp_location: str
    staging_location: str
    template_file: str
    image: str
    repository: str
    image_tag: str
    builder: str
    service_account: str
    machine_type: str
    max_workers: str
    num_workers: str
    network: str
    subnetwork: str
    no_public_ips: bool
    job_name: str
    labels: str

    @property
    def label_list(self) -> list[str]:
        """The labels one by one (a trailing comma adds none)."""
        labels = self.labels.split(",") if self.labels else []
        return labels[:-1] if labels and not labels[-1] else labels


def _missing(command: str, v: Mapping[str, str]) -> list[str]:
    """The required settings that `command` lacks: project, region and bucket (when a gs:// location derives
    from it); the image needs project and region to name the default one."""
    needs = ["image", "project", "region"] if v["BUILDER"] == "cloudbuild" else ["image"]
    if command != "image":
        needs = ["project", "region", "bucket", "image"]
    derived = {"dataflow": ("TEMP_LOCATION", "STAGING_LOCATION"), "template": ("TEMPLATE_FILE",),
               "run-template": ("TEMPLATE_FILE", "TEMP_LOCATION", "STAGING_LOCATION")}.get(command, ())
    missing: list[str] = []
    for need in needs:
        if need == "bucket" and all(v[key] for key in derived):
            continue
        if need == "image":
            if v["IMAGE"]:
                continue
            need = "region" if v["PROJECT"] else "project"
        if not v[need.upper()] and need not in missing:
            missing.append(need)
    return missing


def resolve(command: str, values: Mapping[str, str], default_tag: Callable[[], str]) -> Settings:
    """The settings `command` runs with: `values` (from `gather`) with the defaults filled in, checked."""
    v = dict(values)
    v["REPOSITORY"] = v["REPOSITORY"] or "shardsmith"
    v["BUILDER"] = v["BUILDER"] or "cloudbuild"
    v["IMAGE_TAG"] = v["IMAGE_TAG"] or default_tag()
    missing = _missing(command, v)
    if missing:
        raise UsageError(f"missing setting: {', '.join(missing)} (pass {', '.join('--' + m for m in missing)}; or "
                         f"set {', '.join('SHARDSMITH_' + m.upper() for m in missing)}; or put it in a --config file)")
    bucket = v["BUCKET"].removeprefix("gs://").removesuffix("/")
    v["BUCKET"] = bucket
    if bucket:
        v["TEMP_LOCATION"] = v["TEMP_LOCATION"] or f"gs://{bucket}/shardsmith/temp"
        v["STAGING_LOCATION"] = v["STAGING_LOCATION"] or f"gs://{bucket}/shardsmith/staging"
        v["TEMPLATE_FILE"] = v["TEMPLATE_FILE"] or f"gs://{bucket}/shardsmith/templates/shardsmith-{v['IMAGE_TAG']}.json"
    if not v["IMAGE"] and v["PROJECT"] and v["REGION"]:
        v["IMAGE"] = f"{v['REGION']}-docker.pkg.dev/{v['PROJECT']}/{v['REPOSITORY']}/shardsmith:{v['IMAGE_TAG']}"
    v["JOB_NAME"] = v["JOB_NAME"] or time.strftime("shardsmith-%Y%m%d-%H%M%S", time.gmtime())
    settings = Settings(**{key.lower(): value for key, value in v.items() if key != "NO_PUBLIC_IPS"},
                        no_public_ips=is_true(v["NO_PUBLIC_IPS"]))
    check(settings)
    return settings


def check(s: Settings) -> None:
    """Raises UsageError for the first value Dataflow, gcloud or docker would refuse."""
    if not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", s.job_name):
        raise UsageError(f"--job_name '{s.job_name}' must be lowercase letters, digits and '-', starting with a letter")
    for location in (s.temp_location, s.staging_location, s.template_file):
        if location and not re.fullmatch(r"gs://[a-z0-9][-_.a-z0-9]+[a-z0-9](/.*)?", location, re.S):
            raise UsageError(f"'{location}' must be a gs://BUCKET/PATH location (bucket names: 3-63 characters)")
    for flag, value in (("--max_workers", s.max_workers), ("--num_workers", s.num_workers)):
        if value and not re.fullmatch(r"[1-9][0-9]*", value):
            raise UsageError(f"{flag} must be a positive whole number, got '{value}'")
    if s.builder not in ("cloudbuild", "docker"):
        raise UsageError(f"--builder must be cloudbuild or docker, got '{s.builder}'")
    for label in s.label_list:
        if not re.fullmatch(r"[a-z][-_a-z0-9]{0,62}=[-_a-z0-9]{0,63}", label):
            raise UsageError(f"label '{label}' must be key=value in lowercase letters, digits, '-' and '_'")
