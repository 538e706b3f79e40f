"""A build's typed settings, one dataclass per concern, each taken whole by the stages that need it; and each
setting's flag, declared on its field (shardsmith/settings/flag.py): its default, help, choices, Flex Template
parameter and check are written once, here, and argparse, the Flex Template files and the options recorded in
metadata.json are made from them (pipeline/options/).

pipeline/options/ composes these from the command line into BuildOptions; the graph hands each stage its own
settings object whole, and the report gets what it writes into metadata.json as fields, never by reading the
recorded options back.

The bottom of the build's own parts: this package holds the defaults and choices its flags declare (DEFAULT_MAX_PIXELS,
VALIDATE_MODES, the near-duplicate distances, FEATURE_TYPES, REENCODE_FORMATS), which the work they configure
(images, near duplicates, manifests, the shard writer) imports from here, and imports only shardsmith.format and the
output folder's retention defaults (shardsmith.output_folder) itself: no part imports settings that settings imports
back. Beam-free and TensorFlow-free.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from shardsmith.format.example import IMAGE_MODES, KEY_PREFIX, TASKS
from shardsmith.format.naming import SPLIT_ALIASES, SPLITS, canonical_split
from shardsmith.output_folder import DEFAULT_KEEP_BUILDS, DEFAULT_KEEP_DAYS
from shardsmith.settings.flag import (
    COLUMN,
    COUNT,
    GCS_PATH,
    NUMBER,
    Flag,
    Template,
    checked,
    comma_list,
    nested,
    option,
)

DEFAULT_SEED = 42
DEFAULT_TARGET_SHARD_MB = 128
DEFAULT_MAX_ERROR_FRACTION = 0.05
DEFAULT_MAX_IMAGE_BYTES = 64 << 20
ON_DUPLICATE_MODES = ("keep", "drop", "error")  # --on_duplicate: what to do with identical images
NEAR_DUPLICATE_MODES = ("off", "report", "drop")  # --near_duplicates: look for resized/re-encoded copies
COMPRESSIONS = ("none", "gzip")
SPLIT_NAMES = "(" + "|".join(alias for alias, split in SPLIT_ALIASES.items() if split) + ")"
SHARDS = r"[1-9][0-9]{0,5}"
FEATURE_TYPES = ("int", "float", "string", "int_list", "float_list", "string_list")  # --feature NAME:TYPE
VALIDATE_MODES = ("header", "decode")
# Pillow's own default limit; larger images are error rows (decompression bombs), never an out-of-memory.
DEFAULT_MAX_PIXELS = 89_478_485
# pHash bits a pair may differ in; 10 keeps 5% crops (docs/near_duplicates.md), the confirmation the false pairs.
DEFAULT_MAX_DISTANCE = 10
# Beyond a quarter of the bits, unrelated photos (about 32 bits apart) start to pair, and bands get too narrow.
MAX_DISTANCE = 16
REENCODE_FORMATS = ("none", "jpeg", "png")
DEFAULT_JPEG_QUALITY = 90


def comma_joined(values: tuple) -> str:
    """A tuple default as the command line spells it: its items separated by commas."""
    return ",".join(str(value) for value in values)


def parse_ratios(text: str) -> tuple[float, float, float]:
    try:
        ratios = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise ValueError(f"--split_ratios must be three numbers like 0.8,0.1,0.1, got {text!r}") from None
    if len(ratios) != 3 or any(r < 0 for r in ratios) or sum(ratios) <= 0:
        raise ValueError(f"--split_ratios must be three non-negative numbers with a positive sum, got {text!r}")
    return ratios  # type: ignore[return-value]


def parse_num_shards(text: str) -> tuple[tuple[str, int], ...]:
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
                    raise LookupError(f"--num_shards: unknown split {split!r} (expected one of {', '.join(SPLITS)})")
                counts.append((canonical, int(count)))
    except LookupError as e:
        raise ValueError(str(e)) from None
    except ValueError:
        raise ValueError(f"--num_shards must be N or split=N,..., got {text!r}") from None
    if any(count < 1 for _, count in counts):
        raise ValueError("--num_shards must be at least 1")
    return tuple(counts)


def parse_path_map(items: list[str]) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in items:
        if "=" not in item:
            raise ValueError(f"--path_map must be OLD=NEW, got {item!r}")
        old, new = item.split("=", 1)
        pairs.append((old, new))
    return tuple(pairs)


def parse_prefixes(text: str) -> tuple[str, ...]:
    prefixes = []
    for given in (p.strip() for p in text.split(",") if p.strip()):
        if given.startswith("file://"):
            given = given[len("file://"):]
        if "://" not in given:
            if not given.startswith("/"):
                raise ValueError(f"--allowed_prefixes: {given!r} must be an absolute path or a URI like gs://bucket/")
            # The real path: images are checked by theirs, and a prefix under a symlinked folder must still match.
            given = os.path.realpath(given)
        prefixes.append(given.rstrip("/") + "/")
    return tuple(prefixes)


def parse_features(items: list[str]) -> tuple[tuple[str, str], ...]:
    """Each NAME:TYPE as (name, type). Whether a name is already a column is checked with the columns
    (check_feature_names)."""
    features = []
    for item in items:
        name, _, kind = item.rpartition(":")
        if not name or kind not in FEATURE_TYPES:
            raise ValueError(f"--feature {item!r}: expected NAME:TYPE with TYPE one of {', '.join(FEATURE_TYPES)}")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_./-]*", name):
            raise ValueError(f"--feature {item!r}: a name is letters, digits, '_', '.', '/' or '-'")
        features.append((name, kind))
    return tuple(features)


def _column(what: str, label: str, more: str) -> Flag:
    return Flag(f"the header's column (or JSONL key) holding {what}{more}", group="inputs", metavar="NAME",
                template=Template(label, f"Header name of the {label[0].lower()}{label[1:]} (default: {{default}})",
                                  COLUMN))


@dataclass(frozen=True)
class ManifestSettings:
    """How to read a manifest (ReadManifest, GroupBoxRows), as flags: the one declaration of these fields and
    their defaults. ManifestFormat (shardsmith/manifest/settings.py) is this class with its methods."""

    split_column: str = option("split", _column(
        "train/validation/test", "Split column",
        "; an empty or missing one is placed by --split_ratios (default {default})"))
    uri_column: str = option("image_uri", _column(
        "each image's path or gs:// URI", "Image URI column",
        "; relative paths are resolved against the manifest's folder (default {default})"))
    label_column: str = option("label", _column(
        "the label", "Label column",
        " (default {default}). A CSV without a header is read as split,image_uri,label or image_uri,label"))
    path_map: tuple[tuple[str, str], ...] = option((), Flag(
        "rewrite image URIs that start with OLD to start with NEW (repeatable), e.g. to use a TFRecorder manifest "
        "whose paths are relative to another root", group="inputs", metavar="OLD=NEW", repeatable=True,
        parse=parse_path_map, template=Template(
            "Path map", "Rewrite image URIs that start with OLD to start with NEW; several OLD=NEW pairs separated "
            "by commas. Example: /data/images=gs://my-bucket/images", r"[^=,\r\n]+=[^,\r\n]*")))
    allowed_prefixes: tuple[str, ...] = option((), Flag(
        "only read images under these local folders or gs:// prefixes (comma-separated); a URI elsewhere is an "
        "error row. Local paths are compared by real path, so a symlink cannot lead out. For manifests that come "
        "from other people", group="inputs", metavar="P1,P2", parse=parse_prefixes, text=comma_joined,
        template=Template(
            "Allowed prefixes", "Only read images under these Cloud Storage prefixes (comma-separated); a URI "
            "elsewhere is an error row. Example: gs://my-bucket/images/",
            comma_list(GCS_PATH))))
    task: str = option("classification", Flag(
        "classification: one label per image; multi_label: several in the label column (split by "
        "--list_delimiter); detection: boxes (AutoML Vision object-detection CSV, or JSONL); segmentation: a "
        "class-mask PNG per image in --mask_column", group="inputs", choices=TASKS, template=Template(
            "Task", "classification (one label per image, the default), multi_label (several labels in the label "
            "column), detection (boxes: AutoML Vision object-detection CSV or JSONL) or segmentation (a class-mask "
            "PNG per image in the mask column)"), same_in_every_version=True))
    list_delimiter: str = option(";", Flag(
        "separates the labels of a multi_label row and the values of a *_list feature", group="inputs",
        metavar="C", parse=checked(lambda c: len(c) == 1 and c not in "\r\n\"",
                                   "--list_delimiter must be one character (not a quote or a line break)"),
        template=Template("List delimiter", "One character between the labels of a multi_label row and the "
                          "values of a list feature (default: {default})", r'[^\r\n"]'), same_in_every_version=True))
    normalize_labels: str = option("none", Flag(
        "none (default): labels as written; nfc: each label (and --label_file's) in Unicode NFC form, so 'café' "
        "typed with a composed é and with e + a combining accent (as macOS names files) is one label. Labels that "
        "look alike are reported in the summary and metadata.json either way", group="inputs",
        choices=("none", "nfc"), template=Template(
            "Normalize labels", "none (the default: labels as written) or nfc (Unicode NFC: 'café' composed and "
            "decomposed become one label)")))
    mask_column: str = option("mask_uri", Flag(
        "segmentation: the column of mask URIs", group="inputs", template=Template(
            "Mask column", "segmentation: header name of the mask URI column (default: {default})", r"[^,\r\n]+")))
    features: tuple[tuple[str, str], ...] = option((), Flag(
        "an extra column to store, TYPE one of " + ", ".join(FEATURE_TYPES) + "; repeat for each. `shardsmith "
        "schema MANIFEST` prints these for a manifest", name="feature", group="inputs", metavar="NAME:TYPE",
        repeatable=True, parse=parse_features, template=Template(
            "Extra features", f"Extra manifest columns to store, NAME:TYPE with TYPE one of "
            f"{', '.join(FEATURE_TYPES)}; several separated by commas. Example: age:int,tags:string_list",
            r"[A-Za-z_][A-Za-z0-9_./-]*:(" + "|".join(FEATURE_TYPES) + ")"), same_in_every_version=True))


def check_feature_names(manifest: ManifestSettings) -> None:
    """ValueError for a --feature named like a column the manifest format reads, or like a record key."""
    taken = {manifest.split_column.lower(), manifest.uri_column.lower(), manifest.label_column.lower(),
             manifest.mask_column.lower()}
    for name, kind in manifest.features:
        if name.lower() in taken or name.startswith(KEY_PREFIX):
            raise ValueError(f"--feature {name + ':' + kind!r}: {name!r} is already a column shardsmith reads, "
                             "or an image/ key")
        taken.add(name.lower())


@dataclass(frozen=True)
class PlacementSettings:
    """Where each row goes, decided before any image is read (AssignSplits, PlaceRows)."""

    seed: int = option(DEFAULT_SEED, Flag(
        "placement seed: same inputs and seed, same bytes (default {default})", group="output",
        template=Template("Placement seed", "Same inputs and seed give the same bytes (default {default})",
                          r"[0-9]{1,18}"), same_in_every_version=True))
    split_ratios: tuple[float, float, float] = option((0.8, 0.1, 0.1), Flag(  # for rows that name no split
        "train,validation,test ratios for rows with no split (default {default})", group="inputs",
        parse=parse_ratios, text=comma_joined, template=Template(
            "Split ratios", "train,validation,test ratios for rows without a split (default {default})",
            ",".join([NUMBER] * 3)), same_in_every_version=True))
    num_shards: tuple[tuple[str, int], ...] = option((), Flag(  # (split or "*", count); empty: from target_shard_mb
        "shards per split: N for every split, or e.g. train=16,validation=2,test=2; default: from "
        "--target_shard_mb", group="output", parse=parse_num_shards, text=comma_joined, as_json=dict,
        template=Template(
            "Shards per split", "N for every split, or split=N pairs, e.g. train=1024,validation=128,test=128 "
            "(default: from the target shard size)", f"({SHARDS}|{comma_list(f'{SPLIT_NAMES}={SHARDS}')})")))
    target_shard_mb: float = option(DEFAULT_TARGET_SHARD_MB, Flag(
        "target shard size when --num_shards is not given (default {default})", group="output",
        parse=checked(lambda mb: mb > 0, "--target_shard_mb must be positive"), template=Template(
            "Target shard size (MB)", "Shard size target when num_shards is not given (default {default})",
            NUMBER)))


@dataclass(frozen=True)
class Reencoding:
    max_side: int = option(0, Flag(  # 0: no resizing
        "shrink images whose longer side is larger to this (aspect kept, EXIF orientation applied) and re-encode "
        "them; 0 (default): keep sizes", group="output", metavar="PIXELS",
        parse=checked(lambda side: side >= 0, "--max_side must be 0 (keep sizes) or a number of pixels"),
        template=Template("Max side", "shrink images whose longer side is larger to this many pixels and "
                          "re-encode them; 0 (default): keep sizes", r"[0-9]+"), same_in_every_version=True))
    # none: only images resized, rotated or unreadable by TensorFlow are re-encoded, as JPEG if they were JPEG,
    # else PNG
    format: str = option("none", Flag(
        "re-encode every image as jpeg or png (none, the default: only images resized, rotated, or in formats "
        "TensorFlow cannot decode, such as TIFF)", name="reencode", recorded="reencode", group="output",
        choices=REENCODE_FORMATS, template=Template("Re-encode", "none (default), jpeg or png: re-encode every "
                                                    "image"), same_in_every_version=True))
    jpeg_quality: int = option(DEFAULT_JPEG_QUALITY, Flag(
        "JPEG quality of re-encoded images, 1-95 (default {default})", group="output", metavar="Q",
        parse=checked(lambda quality: 1 <= quality <= 95, "--jpeg_quality must be between 1 and 95"),
        template=Template("JPEG quality", "JPEG quality of re-encoded images, 1-95 (default {default})",
                          r"([1-9]|[1-8][0-9]|9[0-5])"), same_in_every_version=True))

    @property
    def active(self) -> bool:
        return self.max_side > 0 or self.format != "none"


@dataclass(frozen=True)
class RecordSettings:
    """How each image becomes a record (LookupSizes, WriteShards)."""

    validate: str = option("decode", Flag(
        "decode (default): decode every image, which catches truncated files; header: parse headers only, "
        "faster", group="checks", choices=VALIDATE_MODES, template=Template(
            "Validation", "decode (default): decode every image, which catches truncated files; header: parse "
            "headers only")))
    compression: str = option("none", Flag(
        "none (default: JPEG bytes do not compress) or gzip", group="output", choices=COMPRESSIONS,
        template=Template("Compression", "none (default) or gzip"), same_in_every_version=True))
    max_image_bytes: int = option(DEFAULT_MAX_IMAGE_BYTES, Flag(
        "a larger image file is an error row; no more than this is read of it (default {default:,} bytes)",
        group="checks", metavar="N", template=Template(
            "Largest image (bytes)", "Larger files are error rows (default {default})", COUNT)))
    max_pixels: int = option(DEFAULT_MAX_PIXELS, Flag(
        "larger images are rejected as decompression bombs", group="checks", template=Template(
            "Largest image (pixels)", "Larger images are error rows, checked from the header (default {default})",
            COUNT)))
    image_mode: str = option("bytes", Flag(  # path: records hold the image's URI, not its bytes
        "bytes (default): records hold each image's bytes; path: records hold its URI, size and shape (images "
        "stay where they are; load() reads them by path)", group="output", choices=IMAGE_MODES, template=Template(
            "Image mode", "bytes (default): records hold each image's bytes; path: records hold its URI, size "
            "and shape"), same_in_every_version=True))
    reencoding: Reencoding = nested(Reencoding, has_default=True)
    perceptual_hash: bool = False  # --near_duplicates report|drop: the writer signs what it writes (row lists keep it)
    min_side: int = option(0, Flag(
        "an image whose shorter side (as stored, after --max_side) is below this many pixels is an error row; "
        "0 (default): any size", group="checks", metavar="PIXELS",
        parse=checked(lambda side: side >= 0, "--min_side must be 0 (any size) or a number of pixels"),
        recorded_if=lambda records: records.min_side > 0, template=Template(
            "Smallest side", "images whose shorter side is below this many pixels are error rows; 0 (default): "
            "any size", r"[0-9]+")))


@dataclass(frozen=True)
class CheckSettings:
    """What makes the report refuse to publish a build."""

    on_duplicate: str = option("keep", Flag(
        "identical images (same SHA-256): keep (default) writes them all and reports them, drop keeps one copy "
        "(the earliest split; costs a second read of every image), error fails the job", group="checks",
        choices=ON_DUPLICATE_MODES, template=Template(
            "Duplicate images", "keep (default) writes all copies and reports them, drop keeps one copy, error "
            "fails the job")))
    near_duplicates: str = option("off", Flag(
        "resized, re-encoded, brightened or slightly cropped copies (perceptual hash): off (default; finding them "
        "needs every image's pixels), report lists the pairs in near_duplicates.jsonl, drop also turns the "
        "validation/test copy of a training image into an error row (costs a second read of every image); with "
        "--incremental, new images are compared with the published version's too",
        group="checks", choices=NEAR_DUPLICATE_MODES, recorded_if=lambda checks: checks.near_duplicates != "off",
        template=Template(
            "Near-duplicate images", "off (default), report: list resized/re-encoded/brightened copies in "
            "near_duplicates.jsonl, drop: also turn the validation/test copy of a training image into an error "
            "row (a second read of every image)")))
    near_duplicate_distance: int = option(DEFAULT_MAX_DISTANCE, Flag(  # pHash bits two near duplicates may differ in
        "pHash bits (of 64) two images may differ in to be near duplicates (default {default}, measured in "
        "docs/near_duplicates.md)", group="checks", metavar="D",
        parse=checked(lambda bits: 0 <= bits <= MAX_DISTANCE,
                      f"--near_duplicate_distance must be between 0 and {MAX_DISTANCE} (bits of a 64-bit hash)"),
        recorded_if=lambda checks: checks.near_duplicates != "off", template=Template(
            "Near-duplicate distance", "pHash bits (of 64) two near duplicates may differ in, 0 to 16 (default "
            "{default})", r"([0-9]|1[0-6])")))
    max_error_fraction: float = option(DEFAULT_MAX_ERROR_FRACTION, Flag(
        "fail the job when more rows than this fail (default {default})", group="checks",
        parse=checked(lambda fraction: 0 <= fraction <= 1, "--max_error_fraction must be between 0 and 1"),
        template=Template(
            "Error budget", "Fail the job when more than this fraction of rows fail, between 0 and 1 (default "
            "{default})", r"(0(\.[0-9]+)?|1(\.0+)?|\.[0-9]+)")))


@dataclass(frozen=True)
class RetentionSettings:
    """How many published versions an output folder keeps: what retention after each build and each compaction
    (`build_folder.retire_builds`) is told. Shared by `build` and `compact`, which declare the flag once, here."""

    keep_builds: int = option(DEFAULT_KEEP_BUILDS, Flag(
        "published builds kept in the output folder's builds/, the new one included (default {default}); older "
        "ones are removed when a build is published, except tagged ones (`shardsmith tag`)", group="output",
        metavar="K", recorded=None,
        parse=checked(lambda kept: kept >= 1, "--keep_builds must be at least 1 (the build being published)"),
        template=Template(
            "Builds kept", "published builds kept under output_dir/builds, the new one included (default "
            "{default})", r"[1-9][0-9]{0,3}")))
    keep_days: float = option(DEFAULT_KEEP_DAYS, Flag(
        "a version beyond --keep_builds is removed only once a newer one has been published for this many days "
        "(default {default}), so a job reading it has that long to finish or tag it; 0: by --keep_builds alone",
        group="output", metavar="DAYS", recorded=None,
        parse=checked(lambda days: 0 <= days <= 36500, "--keep_days must be a number of days from 0 to 36500"),
        template=Template(
            "Days a replaced version is kept", "a version beyond keep_builds is removed only once a newer one has "
            "been published for this many days (default {default}; 0: by keep_builds alone)",
            r"[0-9]{1,5}(\.[0-9]+)?")))
