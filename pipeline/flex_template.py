"""The Flex Template's files, generated from the `build` flags: `python -m pipeline.flex_template --write`.

  pipeline/flex_template_metadata.json  what `gcloud dataflow flex-template build` reads: one parameter per build
                                        flag, with the console's label and help text and validation regexes
  pipeline/flex_template_flags.json     which parameters are lists (joined with commas) and which are switches
                                        (true/false): what `shardsmith run-template` needs, without Beam

The parser (pipeline/options.py, read by pipeline/flags.py) says which flags exist, in what order, which are
required, their defaults and choices, and which are lists or switches. The table below adds what argparse cannot
say: the console's label and help text ("{default}" is filled in from the parser) and the regex of free-text
values. Regexes of flags with choices and of switches are generated; a list flag's regex is its item's, repeated
with commas. Guarantees: generation fails on a build flag without a row here or a row without a flag, and
tests/test_launch.py fails while the committed files differ from what `--write` would write.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from pipeline.flags import BOOLEAN, LIST, BuildFlag, build_flags
from shardsmith.core.annotations import FEATURE_TYPES
from shardsmith.core.build_lock import LOCK_STALE_AFTER_S
from shardsmith.format.naming import SPLIT_ALIASES

HERE = Path(__file__).resolve().parent
METADATA_FILE = HERE / "flex_template_metadata.json"
FLAGS_FILE = HERE / "flex_template_flags.json"
COMMAND = "python -m pipeline.flex_template --write"
LOCAL_ONLY = frozenset({"writer_processes"})  # remote runners spread shards over their own workers


@dataclass(frozen=True)
class Console:
    label: str
    help: str  # "{default}" becomes the parser's default
    regex: str = ""  # without ^ and $; a list flag's: one item. Empty: generated from choices or a switch


GCS = r"gs://[a-z0-9][-_.a-z0-9]{1,220}[a-z0-9]"
GCS_PATH = GCS + r"(/[^,\r\n]*)?"  # no commas: lists of them are comma-separated
GCS_FOLDER = GCS + r"(/[^\r\n]*)?"
COLUMN = r"[A-Za-z_][A-Za-z0-9_ .-]{0,99}"
NUMBER = r"[0-9]*\.?[0-9]+"
COUNT = r"[1-9][0-9]{0,14}"
SPLIT_NAMES = "(" + "|".join(alias for alias, split in SPLIT_ALIASES.items() if split) + ")"
SHARDS = r"[1-9][0-9]{0,5}"


def comma_list(item: str) -> str:
    return f"{item}(,{item})*"


TABLE: dict[str, Console] = {
    "manifest": Console(
        "Manifest(s)", "CSV, JSONL or Parquet manifest, a glob of them, or a folder of class folders, on Cloud "
        "Storage; several separated by commas. Example: gs://my-bucket/lists/manifest.csv", GCS_PATH),
    "output_dir": Console(
        "Output folder", "Cloud Storage folder for the shards, labels.txt, errors.jsonl, transform_fn/ and "
        "metadata.json. Example: gs://my-bucket/datasets/flowers/20260101", GCS_FOLDER),
    "name": Console(
        "Dataset name", "Prefix of every shard file: letters, digits, '.', '_' or '-', starting with a letter or "
        "digit, no '..'. Example: flowers", r"[A-Za-z0-9](\.?[A-Za-z0-9_-])*\.?"),
    "split_column": Console("Split column", "Header name of the split column (default: {default})", COLUMN),
    "uri_column": Console("Image URI column", "Header name of the image URI column (default: {default})", COLUMN),
    "label_column": Console("Label column", "Header name of the label column (default: {default})", COLUMN),
    "task": Console(
        "Task", "classification (one label per image, the default), multi_label (several labels in the label "
        "column), detection (boxes: AutoML Vision object-detection CSV or JSONL) or segmentation (a class-mask PNG "
        "per image in the mask column)"),
    "list_delimiter": Console(
        "List delimiter", "One character between the labels of a multi_label row and the values of a list feature "
        "(default: {default})", r'[^\r\n"]'),
    "mask_column": Console(
        "Mask column", "segmentation: header name of the mask URI column (default: {default})", r"[^,\r\n]+"),
    "feature": Console(
        "Extra features", f"Extra manifest columns to store, NAME:TYPE with TYPE one of {', '.join(FEATURE_TYPES)}; "
        "several separated by commas. Example: age:int,tags:string_list",
        r"[A-Za-z_][A-Za-z0-9_./-]*:(" + "|".join(FEATURE_TYPES) + ")"),
    "path_map": Console(
        "Path map", "Rewrite image URIs that start with OLD to start with NEW; several OLD=NEW pairs separated by "
        "commas. Example: /data/images=gs://my-bucket/images", r"[^=,\r\n]+=[^,\r\n]*"),
    "allowed_prefixes": Console(
        "Allowed prefixes", "Only read images under these Cloud Storage prefixes (comma-separated); a URI "
        "elsewhere is an error row. Example: gs://my-bucket/images/", comma_list(GCS_PATH)),
    "split_ratios": Console(
        "Split ratios", "train,validation,test ratios for rows without a split (default {default})",
        ",".join([NUMBER] * 3)),
    "seed": Console("Placement seed", "Same inputs and seed give the same bytes (default {default})", r"[0-9]{1,18}"),
    "num_shards": Console(
        "Shards per split", "N for every split, or split=N pairs, e.g. train=1024,validation=128,test=128 "
        "(default: from the target shard size)", f"({SHARDS}|{comma_list(f'{SPLIT_NAMES}={SHARDS}')})"),
    "target_shard_mb": Console(
        "Target shard size (MB)", "Shard size target when num_shards is not given (default {default})", NUMBER),
    "compression": Console("Compression", "none (default) or gzip"),
    "image_mode": Console(
        "Image mode", "bytes (default): records hold each image's bytes; path: records hold its URI, size and shape"),
    "max_side": Console(
        "Max side", "shrink images whose longer side is larger to this many pixels and re-encode them; "
        "0 (default): keep sizes", r"[0-9]+"),
    "reencode": Console("Re-encode", "none (default), jpeg or png: re-encode every image"),
    "jpeg_quality": Console(
        "JPEG quality", "JPEG quality of re-encoded images, 1-95 (default {default})", r"([1-9]|[1-8][0-9]|9[0-5])"),
    "overwrite": Console(
        "Overwrite", "true: publish a new build in place of the dataset in output_dir (readers of the old one "
        "finish it; see keep_builds); default false"),
    "keep_builds": Console(
        "Builds kept", "published builds kept under output_dir/builds, the new one included (default {default})",
        r"[1-9][0-9]{0,3}"),
    "break_lock": Console(
        "Break a stale lock", "true: take over the output folder's lock when its holder sent no heartbeat for "
        f"{LOCK_STALE_AFTER_S // 60} minutes; default false"),
    "validate": Console(
        "Validation", "decode (default): decode every image, which catches truncated files; header: parse headers "
        "only"),
    "on_duplicate": Console(
        "Duplicate images", "keep (default) writes all copies and reports them, drop keeps one copy, error fails "
        "the job"),
    "near_duplicates": Console(
        "Near-duplicate images", "off (default), report: list resized/re-encoded/brightened copies in "
        "near_duplicates.jsonl, drop: also turn the validation/test copy of a training image into an error row "
        "(a second read of every image)"),
    "near_duplicate_distance": Console(
        "Near-duplicate distance", "pHash bits (of 64) two near duplicates may differ in, 0 to 16 (default "
        "{default})", r"([0-9]|1[0-6])"),
    "max_error_fraction": Console(
        "Error budget", "Fail the job when more than this fraction of rows fail, between 0 and 1 (default "
        "{default})", r"(0(\.[0-9]+)?|1(\.0+)?|\.[0-9]+)"),
    "max_image_bytes": Console("Largest image (bytes)", "Larger files are error rows (default {default})", COUNT),
    "max_pixels": Console(
        "Largest image (pixels)", "Larger images are error rows, checked from the header (default {default})", COUNT),
    "temp_dir": Console(
        "tf.transform scratch folder", "Cloud Storage folder for tensorflow-transform's scratch files (default: "
        "temp_location/shardsmith-tft)", GCS_FOLDER),
    "verbose": Console(
        "Verbose", "true: keep TensorFlow's and absl's C++ log lines (CUDA probing, libpng warnings) in the job's "
        "log; default false"),
}


def template_flags() -> list[BuildFlag]:
    """The build flags that are template parameters: the required ones first, each group in the parser's order."""
    flags = [flag for flag in build_flags() if flag.name not in LOCAL_ONLY]
    missing = [flag.name for flag in flags if flag.name not in TABLE]
    extra = sorted(set(TABLE) - {flag.name for flag in flags})
    if missing or extra:
        raise ValueError(f"pipeline/flex_template.py TABLE: flags without a row: {missing}; rows without a flag: "
                         f"{extra}")
    return [flag for flag in flags if flag.required] + [flag for flag in flags if not flag.required]


def regex_of(flag: BuildFlag, row: Console) -> str:
    if flag.kind == BOOLEAN or flag.choices:
        if row.regex:
            raise ValueError(f"--{flag.name}: its regex is generated (from its choices, or true|false); drop it")
        return "^(" + "|".join(("true", "false") if flag.kind == BOOLEAN else flag.choices) + ")$"
    if not row.regex:
        raise ValueError(f"--{flag.name}: a free-text parameter needs a regex in pipeline/flex_template.py")
    return f"^{comma_list(row.regex) if flag.kind == LIST else row.regex}$"


def metadata() -> dict:
    """pipeline/flex_template_metadata.json as a dict."""
    parameters = []
    for flag in template_flags():
        row = TABLE[flag.name]
        parameters.append({
            "name": flag.name,
            "label": row.label,
            "helpText": row.help.format(default=flag.default),
            "isOptional": not flag.required,
            "regexes": [regex_of(flag, row)],
            "paramType": "TEXT",
        })
    return {
        "name": "shardsmith",
        "description": "Balanced, shuffled, sharded TFRecords from an image manifest (shardsmith build on Dataflow).",
        "streaming": False,
        "parameters": parameters,
    }


def flag_kinds() -> dict:
    """pipeline/flex_template_flags.json as a dict."""
    flags = template_flags()
    return {
        "about": f"Generated by `{COMMAND}` from the build flags; do not edit. `shardsmith run-template` joins a "
                 "repeated list flag with commas and turns a bare switch into true.",
        "list": [flag.name for flag in flags if flag.kind == LIST],
        "boolean": [flag.name for flag in flags if flag.kind == BOOLEAN],
    }


def generated() -> dict[Path, str]:
    """Each generated file and the text `--write` gives it."""
    return {path: json.dumps(content, indent=2) + "\n"
            for path, content in ((METADATA_FILE, metadata()), (FLAGS_FILE, flag_kinds()))}


def main(argv: list[str]) -> int:
    if argv not in (["--write"], ["--check"]):
        print(f"usage: python -m pipeline.flex_template --write | --check\n\n{__doc__}", file=sys.stderr)
        return 2
    files = generated()
    stale = [path for path, text in files.items() if not path.is_file() or path.read_text() != text]
    if argv == ["--check"]:
        for path in stale:
            print(f"{path} is out of date: run `{COMMAND}`", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        path.write_text(files[path])
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
