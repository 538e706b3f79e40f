"""Mistakes a manifest's first bytes, column names and first rows show, shared by the formats' checks: a binary
file given as a text manifest (Parquet under another name, a ZIP or .xlsx, gzip, UTF-16, anything with NUL bytes),
column names that lack --uri_column or --label_column, and columns that look swapped (the image URI column holds
no file names while another holds nothing else). Each is one sentence saying what was found and what to do.

Preflight calls these (through each format's `input_problem`) before Beam starts. They read the first
MANIFEST_SAMPLE_BYTES of a manifest and its first SAMPLE_ROWS rows; never an image. Beam-free for local paths.
"""

from __future__ import annotations

from collections import Counter

from shardsmith.images.image_file_names import looks_like_image_path
from shardsmith.manifest.settings import ManifestFormat
from shardsmith.manifest.source import open_manifest

MANIFEST_SAMPLE_BYTES = 4096
SAMPLE_ROWS = 200
# The URI column looks wrong below this share of image file names, another column right at or above the next.
URI_SHARE_BELOW = 0.5
OTHER_SHARE_AT_LEAST = 0.8
_BINARY_KINDS = (
    (b"PAR1", "is a Parquet file, read as Parquet only under a .parquet name: rename it to end in .parquet"),
    (b"PK\x03\x04", "is a ZIP archive (an .xlsx workbook?), not CSV or JSON Lines text; export it as CSV"),
    (b"\x1f\x8b", "is gzip-compressed; decompress it (gunzip) and pass the CSV or JSON Lines file"),
    (b"\xff\xfe", "is UTF-16 text; save it as UTF-8"),
    (b"\xfe\xff", "is UTF-16 text; save it as UTF-8"),
)
# Column names people give the three columns shardsmith reads, each mapped to the flag that names it.
COLUMN_ALIASES = {
    "--uri_column": ("image_uri", "uri", "path", "filepath", "file_path", "file", "filename", "image", "image_path",
                     "gcs_path", "url"),
    "--label_column": ("label", "labels", "class", "class_name", "category", "target", "tag"),
    "--split_column": ("split", "set", "subset", "fold", "partition", "ml_use"),
}


def manifest_head(path: str) -> bytes:
    """The first MANIFEST_SAMPLE_BYTES of a manifest."""
    with open_manifest(path) as f:
        return f.read(MANIFEST_SAMPLE_BYTES)


def binary_problem(path: str) -> str | None:
    """What a text manifest is when it is not text (Parquet, ZIP, gzip, UTF-16, NUL bytes), or None."""
    head = manifest_head(path)
    for magic, what in _BINARY_KINDS:
        if head.startswith(magic):
            return f"manifest {path} {what}"
    if b"\x00" in head:
        return f"manifest {path} holds binary data (NUL bytes), not CSV or JSON Lines text"
    return None


def missing_columns_problem(path: str, fields: list[str], shown: str, fmt: ManifestFormat) -> str | None:
    """For a manifest whose columns are named (`fields`, as written; `shown` says where, e.g. "the header 'a,b'"):
    a sentence when --uri_column or --label_column is not among them (case ignored), suggesting the flags for
    columns with a usual name; None when both are there (a detection manifest's `boxes` stands for the label)."""
    names = [f.lower() for f in fields]
    wanted = {"--uri_column": fmt.uri_column, "--label_column": fmt.label_column}
    missing = [flag for flag, column in wanted.items() if column.lower() not in names]
    if fmt.task == "detection" and "--label_column" in missing and "boxes" in names:
        missing.remove("--label_column")
    if not missing:
        return None
    suggestions = []
    for flag, aliases in COLUMN_ALIASES.items():
        match = next((f for f, n in zip(fields, names, strict=True) if n in aliases), None)
        current = {"--uri_column": fmt.uri_column, "--label_column": fmt.label_column,
                   "--split_column": fmt.split_column}[flag]
        if match is not None and match.lower() != current.lower():
            suggestions.append(f"{flag} {match}")
    lacking = " and ".join(f"no {wanted[flag]!r} column ({flag})" for flag in missing)
    fix = f"; try {' '.join(suggestions)}" if suggestions else f"; name its columns with {', '.join(missing)}"
    return f"manifest {path} has {shown} with {lacking}{fix}"


def swapped_columns_problem(path: str, header: list[str] | None, rows: list[list[str]],
                            fmt: ManifestFormat) -> str | None:
    """From a manifest's column names (`header`, as written; None for a CSV without a header, read in the AutoML
    layout) and its first rows as text: a sentence when the image URI column holds few image file names and
    another column holds (nearly) nothing else, naming both and the fix; None otherwise (URIs without
    extensions included)."""
    if header is not None:
        uri = [f.lower() for f in header].index(fmt.uri_column.lower())
        rows = [r for r in rows if len(r) == len(header)]
    elif fmt.task == "classification" and not fmt.features and rows:
        width = Counter(len(r) for r in rows).most_common(1)[0][0]
        if width not in (2, 3):
            return None
        uri = width - 2  # split,image_uri,label or image_uri,label
        rows = [r for r in rows if len(r) == width]
    else:
        return None
    if not rows:
        return None

    def share(column: int) -> float:
        return sum(looks_like_image_path(r[column]) for r in rows) / len(rows)

    others = [c for c in range(len(rows[0])) if c != uri]
    best = max(others, key=share, default=None)
    if best is None or share(uri) >= URI_SHARE_BELOW or share(best) < OTHER_SHARE_AT_LEAST:
        return None
    example = next(r[best] for r in rows if looks_like_image_path(r[best]))
    read_as_uri = next((r[uri] for r in rows if not looks_like_image_path(r[uri])), rows[0][uri])
    if header is None:
        return (f"manifest {path}: the columns look swapped: column {best + 1} holds image paths (e.g. "
                f"{example[:100]!r}) and column {uri + 1}, read as the image URI, holds {read_as_uri[:60]!r}; a CSV "
                "without a header is read as split,image_uri,label (or image_uri,label): reorder its columns, or "
                "add a header row naming them and pass --uri_column/--label_column")
    fix = f"--uri_column {header[best]}"
    if header[best].lower() == fmt.label_column.lower():
        fix += f" --label_column {header[uri]}"
    return (f"manifest {path}: the columns look swapped: its {header[best]!r} column holds image paths (e.g. "
            f"{example[:100]!r}) and {header[uri]!r} (--uri_column) holds {read_as_uri[:60]!r}; try {fix}")
