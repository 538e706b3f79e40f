"""shardsmith's own options for `build`. Everything argparse does not know passes through to Beam."""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass

from shardsmith.core.annotations import FEATURE_TYPES
from shardsmith.core.build_lock import LOCK_STALE_AFTER_S
from shardsmith.core.load_images import DEFAULT_MAX_PIXELS, VALIDATE_MODES
from shardsmith.core.manifest import ManifestFormat
from shardsmith.core.near_duplicates import DEFAULT_MAX_DISTANCE, MAX_DISTANCE
from shardsmith.core.reencode import DEFAULT_JPEG_QUALITY, REENCODE_FORMATS, Reencoding
from shardsmith.core.settings import (
    DEFAULT_MAX_ERROR_FRACTION,
    DEFAULT_MAX_IMAGE_BYTES,
    DEFAULT_SEED,
    DEFAULT_TARGET_SHARD_MB,
    NEAR_DUPLICATE_MODES,
    ON_DUPLICATE_MODES,
    CheckSettings,
    PlacementSettings,
    RecordSettings,
)
from shardsmith.errors import UsageError
from shardsmith.format.build_folder import DEFAULT_KEEP_BUILDS
from shardsmith.format.example import IMAGE_MODES, KEY_PREFIX, TASKS
from shardsmith.format.naming import NAME_MAX_BYTES, SPLITS, canonical_split, is_remote, longest_file_name

DATASET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # the whole name: use fullmatch


@dataclass(frozen=True)
class BuildOptions:
    """`shardsmith build`'s options, composed of the settings each stage takes whole (shardsmith/core/settings.py
    and ManifestFormat), plus what only the launcher uses (the output folder's lock and scratch space)."""

    manifests: tuple[str, ...]
    output_dir: str
    name: str
    manifest: ManifestFormat
    placement: PlacementSettings
    records: RecordSettings
    checks: CheckSettings
    overwrite: bool = False
    temp_dir: str | None = None
    writer_processes: int = -1  # local runs only; -1: one per core (see pipeline/runner.py)
    break_lock: bool = False
    keep_builds: int = DEFAULT_KEEP_BUILDS

    def recorded(self) -> dict:
        """The options as recorded in metadata.json: what shapes the output, not where it ran. Written, never
        read back by the build."""
        fmt, placement, records, checks = self.manifest, self.placement, self.records, self.checks
        reencoding = records.reencoding
        return {
            "manifests": list(self.manifests), "name": self.name,
            "split_column": fmt.split_column, "uri_column": fmt.uri_column, "label_column": fmt.label_column,
            "path_map": [list(p) for p in fmt.path_map], "split_ratios": list(placement.split_ratios),
            "seed": placement.seed, "num_shards": dict(placement.num_shards),
            "target_shard_mb": placement.target_shard_mb, "validate": records.validate,
            "compression": records.compression, "max_error_fraction": checks.max_error_fraction,
            "max_image_bytes": records.max_image_bytes, "max_pixels": records.max_pixels,
            "on_duplicate": checks.on_duplicate, "allowed_prefixes": list(fmt.allowed_prefixes),
            "image_mode": records.image_mode, "max_side": reencoding.max_side, "reencode": reencoding.format,
            "jpeg_quality": reencoding.jpeg_quality, "task": fmt.task, "list_delimiter": fmt.list_delimiter,
            "mask_column": fmt.mask_column, "features": [list(f) for f in fmt.features],
        } | ({"near_duplicates": checks.near_duplicates, "near_duplicate_distance": checks.near_duplicate_distance}
             if checks.near_duplicates != "off" else {})


def add_build_arguments(parser: argparse.ArgumentParser) -> None:
    inputs = parser.add_argument_group("inputs")
    inputs.add_argument("--manifest", action="append", required=True, metavar="PATH",
                        help="CSV, JSONL or Parquet manifest, a glob of them, or a folder of class folders "
                             "(DIR/<label>/<file> or DIR/<split>/<label>/<file>); repeatable")
    inputs.add_argument("--split_column", default="split", metavar="NAME",
                        help="the header's column (or JSONL key) holding train/validation/test; an empty or "
                             "missing one is placed by --split_ratios (default split)")
    inputs.add_argument("--uri_column", default="image_uri", metavar="NAME",
                        help="the header's column (or JSONL key) holding each image's path or gs:// URI; relative "
                             "paths are resolved against the manifest's folder (default image_uri)")
    inputs.add_argument("--label_column", default="label", metavar="NAME",
                        help="the header's column (or JSONL key) holding the label (default label). A CSV without "
                             "a header is read as split,image_uri,label or image_uri,label")
    inputs.add_argument("--task", choices=TASKS, default="classification",
                        help="classification: one label per image; multi_label: several in the label column "
                             "(split by --list_delimiter); detection: boxes (AutoML Vision object-detection CSV, "
                             "or JSONL); segmentation: a class-mask PNG per image in --mask_column")
    inputs.add_argument("--list_delimiter", default=";", metavar="C",
                        help="separates the labels of a multi_label row and the values of a *_list feature")
    inputs.add_argument("--mask_column", default="mask_uri", help="segmentation: the column of mask URIs")
    inputs.add_argument("--feature", action="append", default=[], metavar="NAME:TYPE",
                        help="an extra column to store, TYPE one of " + ", ".join(FEATURE_TYPES) +
                             "; repeat for each. `shardsmith schema MANIFEST` prints these for a manifest")
    inputs.add_argument("--path_map", action="append", default=[], metavar="OLD=NEW",
                        help="rewrite image URIs that start with OLD to start with NEW (repeatable), e.g. to "
                             "use a TFRecorder manifest whose paths are relative to another root")
    inputs.add_argument("--allowed_prefixes", default="", metavar="P1,P2",
                        help="only read images under these local folders or gs:// prefixes (comma-separated); "
                             "a URI elsewhere is an error row. Local paths are compared by real path, so a symlink "
                             "cannot lead out. For manifests that come from other people")
    inputs.add_argument("--split_ratios", default="0.8,0.1,0.1",
                        help="train,validation,test ratios for rows with no split (default 0.8,0.1,0.1)")

    output = parser.add_argument_group("output")
    output.add_argument("--output_dir", required=True, metavar="DIR",
                        help="local folder or gs:// URI to build into: empty, new, or holding earlier shardsmith "
                             "builds only")
    output.add_argument("--name", required=True, help="dataset name, the prefix of every shard file")
    output.add_argument("--seed", type=int, default=DEFAULT_SEED,
                        help=f"placement seed: same inputs and seed, same bytes (default {DEFAULT_SEED})")
    output.add_argument("--num_shards", default="",
                        help="shards per split: N for every split, or e.g. train=16,validation=2,test=2; "
                             "default: from --target_shard_mb")
    output.add_argument("--target_shard_mb", type=float, default=DEFAULT_TARGET_SHARD_MB,
                        help=f"target shard size when --num_shards is not given (default {DEFAULT_TARGET_SHARD_MB})")
    output.add_argument("--compression", choices=("none", "gzip"), default="none",
                        help="none (default: JPEG bytes do not compress) or gzip")
    output.add_argument("--image_mode", choices=IMAGE_MODES, default="bytes",
                        help="bytes (default): records hold each image's bytes; path: records hold its URI, "
                             "size and shape (images stay where they are; load() reads them by path)")
    output.add_argument("--max_side", type=int, default=0, metavar="PIXELS",
                        help="shrink images whose longer side is larger to this (aspect kept, EXIF orientation "
                             "applied) and re-encode them; 0 (default): keep sizes")
    output.add_argument("--reencode", choices=REENCODE_FORMATS, default="none",
                        help="re-encode every image as jpeg or png (none, the default: only images resized, "
                             "rotated, or in formats TensorFlow cannot decode, such as TIFF)")
    output.add_argument("--jpeg_quality", type=int, default=DEFAULT_JPEG_QUALITY, metavar="Q",
                        help=f"JPEG quality of re-encoded images, 1-95 (default {DEFAULT_JPEG_QUALITY})")
    output.add_argument("--overwrite", action="store_true",
                        help="publish a new build in place of the dataset already in --output_dir; readers of the "
                             "old one finish reading it (see --keep_builds)")
    output.add_argument("--keep_builds", type=int, default=DEFAULT_KEEP_BUILDS, metavar="K",
                        help=f"published builds kept in --output_dir/builds, the new one included (default "
                             f"{DEFAULT_KEEP_BUILDS}); older ones are removed when a build is published")
    output.add_argument("--break_lock", action="store_true",
                        help="take over the output folder's lock when its holder has sent no heartbeat for "
                             f"{LOCK_STALE_AFTER_S // 60} minutes (a lost launcher); a lock held by a live build "
                             "is never taken")

    checks = parser.add_argument_group("checks")
    checks.add_argument("--validate", choices=VALIDATE_MODES, default="decode",
                        help="decode (default): decode every image, which catches truncated files; "
                             "header: parse headers only, faster")
    checks.add_argument("--on_duplicate", choices=ON_DUPLICATE_MODES, default="keep",
                        help="identical images (same SHA-256): keep (default) writes them all and reports them, "
                             "drop keeps one copy (the earliest split; costs a second read of every image), "
                             "error fails the job")
    checks.add_argument("--near_duplicates", choices=NEAR_DUPLICATE_MODES, default="off",
                        help="resized, re-encoded, brightened or slightly cropped copies (perceptual hash): off "
                             "(default; finding them needs every image's pixels), report lists the pairs in "
                             "near_duplicates.jsonl, drop also turns the validation/test copy of a training image "
                             "into an error row (costs a second read of every image)")
    checks.add_argument("--near_duplicate_distance", type=int, default=DEFAULT_MAX_DISTANCE, metavar="D",
                        help=f"pHash bits (of 64) two images may differ in to be near duplicates (default "
                             f"{DEFAULT_MAX_DISTANCE}, measured in docs/near_duplicates.md)")
    checks.add_argument("--max_error_fraction", type=float, default=DEFAULT_MAX_ERROR_FRACTION,
                        help=f"fail the job when more rows than this fail (default {DEFAULT_MAX_ERROR_FRACTION})")
    checks.add_argument("--max_image_bytes", type=int, default=DEFAULT_MAX_IMAGE_BYTES, metavar="N",
                        help=f"a larger image file is an error row; no more than this is read of it (default "
                             f"{DEFAULT_MAX_IMAGE_BYTES:,} bytes)")
    checks.add_argument("--max_pixels", type=int, default=DEFAULT_MAX_PIXELS,
                        help="larger images are rejected as decompression bombs")
    parser.add_argument("--writer_processes", type=int, default=-1, metavar="N",
                        help="local runs: processes that write shards (default: one per core; 0: write in the "
                             "runner's own process). Ignored by remote runners, which spread shards over workers")
    parser.add_argument("--temp_dir", default=None,
                        help="scratch folder for tensorflow-transform (default: --temp_location, or a local "
                             "temporary folder)")
    parser.add_argument("--verbose", action="store_true",
                        help="keep TensorFlow's and absl's C++ log lines (CUDA probing, libpng warnings), hidden "
                             "by default; the same as SHARDSMITH_VERBOSE=1")


def _check_name_length(name: str) -> None:
    """UsageError unless every file name a build of `name` makes fits NAME_MAX_BYTES: checked here, not when
    the first shard is renamed after every image was read."""
    size = len(name.encode("utf-8"))
    allowed = NAME_MAX_BYTES - len(longest_file_name("").encode("utf-8"))
    if size > allowed:
        raise UsageError(f"--name is {size} bytes long; the build's longest file name "
                         f"({longest_file_name('<name>')}) must fit the file system's limit of {NAME_MAX_BYTES} "
                         f"bytes, so the name may have at most {allowed}")


SUPPORTED_SCHEMES = ("gs://",)


def _check_scheme(flag: str, value: str | None) -> None:
    """UsageError for a URI in a scheme other than gs:// (local paths have none)."""
    if value and is_remote(value) and not value.startswith(SUPPORTED_SCHEMES):
        scheme = value.split("://", 1)[0] + "://"
        raise UsageError(f"{flag} {value!r}: shardsmith reads and writes local paths and "
                         f"{', '.join(SUPPORTED_SCHEMES)} URIs only, not {scheme}")


def _parse_ratios(text: str) -> tuple[float, float, float]:
    try:
        ratios = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise UsageError(f"--split_ratios must be three numbers like 0.8,0.1,0.1, got {text!r}") from None
    if len(ratios) != 3 or any(r < 0 for r in ratios) or sum(ratios) <= 0:
        raise UsageError(f"--split_ratios must be three non-negative numbers with a positive sum, got {text!r}")
    return ratios  # type: ignore[return-value]


def _parse_num_shards(text: str) -> tuple[tuple[str, int], ...]:
    if not text:
        return ()
    try:
        if "=" not in text:
            counts = [("*", int(text))]
        else:
            counts = []
            for part in text.split(","):
                split, count = part.split("=")
                canonical = canonical_split(split)
                if canonical is None:
                    raise UsageError(f"--num_shards: unknown split {split!r} (expected one of {', '.join(SPLITS)})")
                counts.append((canonical, int(count)))
    except ValueError:
        raise UsageError(f"--num_shards must be N or split=N,..., got {text!r}") from None
    if any(count < 1 for _, count in counts):
        raise UsageError("--num_shards must be at least 1")
    return tuple(counts)


def _parse_path_map(items: list[str]) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in items:
        if "=" not in item:
            raise UsageError(f"--path_map must be OLD=NEW, got {item!r}")
        old, new = item.split("=", 1)
        pairs.append((old, new))
    return tuple(pairs)


def build_options_from(args: argparse.Namespace) -> BuildOptions:
    if not DATASET_NAME.fullmatch(args.name) or ".." in args.name:
        raise UsageError(f"--name {args.name!r} must be letters, digits, '.', '_' or '-' (no slashes, no '..')")
    _check_name_length(args.name)
    for flag, value in (("--output_dir", args.output_dir), ("--temp_dir", args.temp_dir)):
        _check_scheme(flag, value)
    if args.keep_builds < 1:
        raise UsageError("--keep_builds must be at least 1 (the build being published)")
    if not 0 <= args.max_error_fraction <= 1:
        raise UsageError("--max_error_fraction must be between 0 and 1")
    if not 0 <= args.near_duplicate_distance <= MAX_DISTANCE:
        raise UsageError(f"--near_duplicate_distance must be between 0 and {MAX_DISTANCE} (bits of a 64-bit hash)")
    if args.max_side < 0:
        raise UsageError("--max_side must be 0 (keep sizes) or a number of pixels")
    if not 1 <= args.jpeg_quality <= 95:
        raise UsageError("--jpeg_quality must be between 1 and 95")
    if args.target_shard_mb <= 0:
        raise UsageError("--target_shard_mb must be positive")
    if len(args.list_delimiter) != 1 or args.list_delimiter in "\r\n\"":
        raise UsageError("--list_delimiter must be one character (not a quote or a line break)")
    if args.task in ("detection", "segmentation") and (args.max_side or args.reencode != "none"):
        raise UsageError(f"--task {args.task} cannot yet be combined with --max_side or --reencode: boxes and "
                         "masks would have to follow the resize and the EXIF rotation")
    features = _parse_features(args.feature, args)
    return BuildOptions(
        manifests=tuple(_absolute_manifest(m) for m in args.manifest),
        output_dir=_absolute_path(args.output_dir).rstrip("/") or "/",
        name=args.name,
        manifest=ManifestFormat(
            split_column=args.split_column, uri_column=args.uri_column, label_column=args.label_column,
            path_map=_parse_path_map(args.path_map), allowed_prefixes=_parse_prefixes(args.allowed_prefixes),
            task=args.task, list_delimiter=args.list_delimiter, mask_column=args.mask_column, features=features,
        ),
        placement=PlacementSettings(
            seed=args.seed, split_ratios=_parse_ratios(args.split_ratios),
            num_shards=_parse_num_shards(args.num_shards), target_shard_mb=args.target_shard_mb,
        ),
        records=RecordSettings(
            validate=args.validate, compression=args.compression, max_image_bytes=args.max_image_bytes,
            max_pixels=args.max_pixels, image_mode=args.image_mode,
            perceptual_hash=args.near_duplicates == "report",
            reencoding=Reencoding(max_side=args.max_side, format=args.reencode, jpeg_quality=args.jpeg_quality),
        ),
        checks=CheckSettings(max_error_fraction=args.max_error_fraction, on_duplicate=args.on_duplicate,
                             near_duplicates=args.near_duplicates,
                             near_duplicate_distance=args.near_duplicate_distance),
        overwrite=args.overwrite,
        temp_dir=_absolute_path(args.temp_dir) if args.temp_dir else None,
        writer_processes=args.writer_processes,
        break_lock=args.break_lock,
        keep_builds=args.keep_builds,
    )


def _parse_features(items: list[str], args: argparse.Namespace) -> tuple[tuple[str, str], ...]:
    taken = {args.split_column.lower(), args.uri_column.lower(), args.label_column.lower(), args.mask_column.lower()}
    features = []
    for item in items:
        name, _, kind = item.rpartition(":")
        if not name or kind not in FEATURE_TYPES:
            raise UsageError(f"--feature {item!r}: expected NAME:TYPE with TYPE one of {', '.join(FEATURE_TYPES)}")
        if name.lower() in taken or name.startswith(KEY_PREFIX):
            raise UsageError(f"--feature {item!r}: {name!r} is already a column shardsmith reads, or an image/ key")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_./-]*", name):
            raise UsageError(f"--feature {item!r}: a name is letters, digits, '_', '.', '/' or '-'")
        taken.add(name.lower())
        features.append((name, kind))
    return tuple(features)


def _parse_prefixes(text: str) -> tuple[str, ...]:
    prefixes = []
    for given in (p.strip() for p in text.split(",") if p.strip()):
        if given.startswith("file://"):
            given = given[len("file://"):]
        if "://" not in given:
            if not given.startswith("/"):
                raise UsageError(f"--allowed_prefixes: {given!r} must be an absolute path or a URI like gs://bucket/")
            # The real path: images are checked by theirs, and a prefix under a symlinked folder must still match.
            given = os.path.realpath(given)
        prefixes.append(given.rstrip("/") + "/")
    return tuple(prefixes)


def _absolute_manifest(given: str) -> str:
    """A local manifest path made absolute (against the working directory), so that the relative image paths in
    it resolve to absolute paths, which --allowed_prefixes are checked against. URIs are kept as given."""
    return given if is_remote(given) else os.path.abspath(given)


def _absolute_path(given: str) -> str:
    """A local path made absolute against the launcher's working directory, at parse time and for every runner: a
    portable runner's workers run in their own working directory, where a relative path means another folder."""
    return given if is_remote(given) else os.path.abspath(given)


def own_flag_names() -> frozenset[str]:
    """`shardsmith build`'s own flags, without their dashes."""
    from pipeline.flags import build_flags

    return frozenset(flag.name for flag in build_flags()) | {"help"}


def normalize_flags(argv: list[str], own: frozenset[str]) -> list[str]:
    """`--num-shards 4` and `--output-dir=x` as `--num_shards 4` and `--output_dir=x`: a dashed spelling of one
    of shardsmith's own flags is that flag. Beam's flags are left as given (Beam reads its own)."""
    normalized = []
    for arg in argv:
        if arg == "--":
            return normalized + argv[len(normalized):]
        name, eq, value = arg[2:].partition("=")
        if arg.startswith("--") and "-" in name and name.replace("-", "_") in own:
            arg = f"--{name.replace('-', '_')}{eq}{value}"
        normalized.append(arg)
    return normalized


def reject_unknown_flags(argv: list[str], own: frozenset[str], beam: frozenset[str]) -> None:
    """Raises UsageError naming every flag that neither shardsmith (exactly, or as argparse's unambiguous
    abbreviation) nor Beam knows, with the closest known flag: Beam would otherwise drop it without a word."""
    import difflib

    unknown = []
    for arg in argv:
        if arg == "--":
            break
        if arg.startswith("--"):
            name = arg[2:].partition("=")[0]
            if name and (name in beam or any(flag.startswith(name) for flag in own)):
                continue
        elif arg == "-h" or not (arg.startswith("-") and arg[1:2].isalpha()):
            continue  # a value (-1 included), or -h; Beam discards single-dash flags, so they are errors too
        close = difflib.get_close_matches(arg.lstrip("-").partition("=")[0].replace("-", "_"),
                                          sorted(own | beam), n=1)
        unknown.append(arg.partition("=")[0] + (f" (did you mean --{close[0]}?)" if close else ""))
    if unknown:
        raise UsageError(f"unknown flag{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
                         "`shardsmith build --help` lists shardsmith's flags, other flags must be Apache Beam's")
