"""BuildOptions: `shardsmith build`'s options as the settings each stage takes whole (shardsmith/settings/__init__.py),
plus the flags only the launcher reads (inputs, output folder, its lock, scratch space), declared here on their
fields like the settings' own (shardsmith/settings/flag.py). Guarantee: `recorded()` is made from the declarations,
in metadata.json's order, so a new recorded flag needs no line here; `recorded_flags()` lists the recorded flags
in that order.
"""

from __future__ import annotations

import os
import re
from dataclasses import MISSING, dataclass

from shardsmith.format.naming import NAME_MAX_BYTES, is_remote, longest_file_name
from shardsmith.manifest import ManifestFormat
from shardsmith.output_folder import LOCK_STALE_AFTER_S
from shardsmith.settings import (
    CheckSettings,
    ManifestSettings,
    PlacementSettings,
    RecordSettings,
    RetentionSettings,
)
from shardsmith.settings.flag import (
    GCS_FOLDER,
    GCS_PATH,
    Declared,
    Flag,
    Template,
    checked,
    declared,
    nested,
    option,
    recorded_values,
)

DEFAULT_MAX_REMOVED_FRACTION = 0.1  # --incremental: more removed rows than this look like a truncated manifest
DATASET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # the whole name: use fullmatch
SUPPORTED_SCHEMES = ("gs://", "s3://")
# metadata.json's options, in the order builds have always written them; a key not listed follows them, in the
# order of the declarations.
RECORDED_ORDER = (
    "manifests", "name", "split_column", "uri_column", "label_column", "path_map", "split_ratios", "seed",
    "num_shards", "target_shard_mb", "validate", "compression", "max_error_fraction", "max_image_bytes",
    "max_pixels", "on_duplicate", "allowed_prefixes", "image_mode", "max_side", "reencode", "jpeg_quality", "task",
    "list_delimiter", "mask_column", "features", "near_duplicates", "near_duplicate_distance",
)


def check_name(name: str) -> str:
    """ValueError unless `name` is a dataset name every file name of a build of it can carry: checked here, not
    when the first shard is renamed after every image was read."""
    if not DATASET_NAME.fullmatch(name) or ".." in name:
        raise ValueError(f"--name {name!r} must be letters, digits, '.', '_' or '-' (no slashes, no '..')")
    size = len(name.encode("utf-8"))
    allowed = NAME_MAX_BYTES - len(longest_file_name("").encode("utf-8"))
    if size > allowed:
        raise ValueError(f"--name is {size} bytes long; the build's longest file name "
                         f"({longest_file_name('<name>')}) must fit the file system's limit of {NAME_MAX_BYTES} "
                         f"bytes, so the name may have at most {allowed}")
    return name


def _check_scheme(flag: str, value: str) -> None:
    """ValueError for a URI in a scheme other than gs:// or s3:// (local paths have none)."""
    if value and is_remote(value) and not value.startswith(SUPPORTED_SCHEMES):
        scheme = value.split("://", 1)[0] + "://"
        raise ValueError(f"{flag} {value!r}: shardsmith reads and writes local paths and "
                         f"{', '.join(SUPPORTED_SCHEMES)} URIs only, not {scheme}")


def absolute_path(given: str) -> str:
    """A local path made absolute against the launcher's working directory, at parse time and for every runner: a
    portable runner's workers run in their own working directory, where a relative path means another folder.
    URIs are kept as given."""
    return given if is_remote(given) else os.path.abspath(given)


def absolute_manifests(given: list[str]) -> tuple[str, ...]:
    """Local manifest paths made absolute, so that the relative image paths in them resolve to absolute paths,
    which --allowed_prefixes are checked against."""
    return tuple(absolute_path(manifest) for manifest in given)


def output_folder(given: str) -> str:
    _check_scheme("--output_dir", given)
    return absolute_path(given).rstrip("/") or "/"


def label_list_path(given: str) -> str:
    _check_scheme("--label_file", given)
    return absolute_path(given)


def temp_folder(given: str) -> str:
    _check_scheme("--temp_dir", given)
    return absolute_path(given)


@dataclass(frozen=True)
class BuildOptions:
    """`shardsmith build`'s options: the settings each stage takes whole, and what only the launcher uses."""

    manifests: tuple[str, ...] = option(MISSING, Flag(
        "CSV, JSONL or Parquet manifest, a glob of them, or a folder of class folders (DIR/<label>/<file> or "
        "DIR/<split>/<label>/<file>); repeatable", name="manifest", group="inputs", metavar="PATH",
        required=True, repeatable=True, parse=absolute_manifests, template=Template(
            "Manifest(s)", "CSV, JSONL or Parquet manifest, a glob of them, or a folder of class folders, on Cloud "
            "Storage; several separated by commas. Example: gs://my-bucket/lists/manifest.csv", GCS_PATH)))
    output_dir: str = option(MISSING, Flag(
        "local folder, gs:// or s3:// URI to build into: empty, new, or holding earlier shardsmith builds only",
        group="output", metavar="DIR", required=True, parse=output_folder, recorded=None, template=Template(
            "Output folder", "Cloud Storage folder for the shards, labels.txt, errors.jsonl, transform_fn/ and "
            "metadata.json. Example: gs://my-bucket/datasets/flowers/20260101", GCS_FOLDER)))
    name: str = option(MISSING, Flag(
        "dataset name, the prefix of every shard file", group="output", required=True, parse=check_name,
        template=Template(
            "Dataset name", "Prefix of every shard file: letters, digits, '.', '_' or '-', starting with a letter "
            "or digit, no '..'. Example: flowers", r"[A-Za-z0-9](\.?[A-Za-z0-9_-])*\.?"), same_in_every_version=True))
    manifest: ManifestFormat = nested(ManifestSettings, ManifestFormat)
    placement: PlacementSettings = nested(PlacementSettings)
    records: RecordSettings = nested(RecordSettings)
    checks: CheckSettings = nested(CheckSettings)
    label_file: str | None = option(None, Flag(
        "a file listing the labels, one a line (UTF-8): ids are 0..N-1 in its order instead of the training "
        "split's labels in alphabetical order; a row with another label is an error row, a listed label no row "
        "carries keeps its id", group="inputs", metavar="FILE", parse=label_list_path,
        recorded_if=lambda options: options.label_file is not None, template=Template(
            "Label list", "Cloud Storage file listing the labels, one a line: ids 0..N-1 in its order (default: "
            "the training split's labels in alphabetical order); rows with another label are error rows. "
            "Example: gs://my-bucket/lists/labels.txt", GCS_PATH)))
    overwrite: bool = option(False, Flag(
        "publish a new build in place of the dataset already in --output_dir; readers of the old one finish "
        "reading it (see --keep_builds)", group="output", recorded=None, template=Template(
            "Overwrite", "true: publish a new build in place of the dataset in output_dir (readers of the old one "
            "finish it; see keep_builds); default false")))
    temp_dir: str | None = option(None, Flag(
        "scratch folder for tensorflow-transform (default: --temp_location, or a local temporary folder)",
        parse=temp_folder, recorded=None, template=Template(
            "tf.transform scratch folder", "Cloud Storage folder for tensorflow-transform's scratch files "
            "(default: temp_location/shardsmith-tft)", GCS_FOLDER)))
    writer_processes: int = option(-1, Flag(  # -1: one per core (pipeline/running/runner.py)
        "local runs: processes that write shards (default: one per core, at most one per shard; none "
        "for a build of at most 256 images and 16 MB; 0: write in the runner's own process). "
        "Ignored by remote runners, which spread shards over workers", metavar="N", recorded=None,
        template=None))  # local runs only: remote runners spread shards over their own workers
    break_lock: bool = option(False, Flag(
        "take over the output folder's lock when its holder has sent no heartbeat for "
        f"{LOCK_STALE_AFTER_S // 60} minutes (a lost launcher); a lock held by a live build is never taken",
        group="output", recorded=None, template=Template(
            "Break a stale lock", "true: take over the output folder's lock when its holder sent no heartbeat "
            f"for {LOCK_STALE_AFTER_S // 60} minutes; default false")))
    retention: RetentionSettings = nested(RetentionSettings, has_default=True)  # --keep_builds
    no_card: bool = option(False, Flag(
        "write no dataset card (card.html in the version's build folder: its data, changes and mixing on one "
        "page; `shardsmith card` writes one later)", group="output", recorded=None, template=Template(
            "No dataset card", "true: write no card.html into the version's build folder; default false")))
    incremental: bool = option(False, Flag(
        "add to the dataset published in --output_dir: only manifest rows it does not hold are read; rows it holds "
        "that the manifest lacks are removed; label ids keep their meaning (a folder without a dataset: a first, "
        "full build whose rows later incremental builds compare against)", group="output", recorded=None,
        template=Template(
            "Incremental", "true: add to the dataset in output_dir, reading only the manifest's new rows and "
            "removing the rows it no longer lists; default false")))
    max_removed_fraction: float = option(DEFAULT_MAX_REMOVED_FRACTION, Flag(
        "--incremental: fail, before anything is written, when the manifest lacks more than this fraction of the "
        "published rows (a truncated export), default {default}", group="checks", metavar="FRACTION",
        recorded=None,
        parse=checked(lambda fraction: 0 <= fraction <= 1, "--max_removed_fraction must be between 0 and 1"),
        template=Template(
            "Removal budget", "With incremental: fail before anything is written when the manifest lacks more than "
            "this fraction of the published rows, between 0 and 1 (default {default})",
            r"(0(\.[0-9]+)?|1(\.0+)?|\.[0-9]+)")))
    verbose: bool = option(False, Flag(
        "keep TensorFlow's and absl's C++ log lines (CUDA probing, libpng warnings), hidden by default; the same "
        "as SHARDSMITH_VERBOSE=1", recorded=None, template=Template(
            "Verbose", "true: keep TensorFlow's and absl's C++ log lines (CUDA probing, libpng warnings) in the "
            "job's log; default false")))

    def recorded(self) -> dict:
        """The options as recorded in metadata.json: what shapes the output, not where it ran. Written, never
        read back by the build."""
        return recorded_values(self, recorded_flags())


def recorded_flags() -> list[Declared]:
    """BuildOptions' recorded flags, in metadata.json's order: RECORDED_ORDER, then the rest as declared."""
    rank = {key: position for position, key in enumerate(RECORDED_ORDER)}
    return sorted((flag for flag in declared(BuildOptions) if flag.flag.recorded is not None),
                  key=lambda flag: rank.get(flag.recorded_key, len(rank)))
