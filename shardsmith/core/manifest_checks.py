"""Mistakes an input shows before a build reads it, each as one sentence saying what was found and what to do:
a binary file given as manifest (Parquet, a ZIP or .xlsx, gzip, UTF-16, anything with NUL bytes), CSV columns
that look swapped (the image URI column holds no file names while another holds nothing else), and a folder
without class folders (its images at the wrong depth, or none).

Preflight (pipeline/preflight.py) calls these before Beam starts. They read the first MANIFEST_SAMPLE_BYTES of a
manifest and its first SAMPLE_ROWS rows, or list a folder's names until one image sits where a class folder's
image sits (the whole folder only when none does); never an image. Beam-free for local paths.
"""

from __future__ import annotations

import csv
import os
from collections import Counter

from shardsmith.core.manifest import (
    IMAGE_EXTENSIONS,
    ManifestFormat,
    _open_binary,
    looks_like_image_path,
    manifest_lines,
)
from shardsmith.format.naming import canonical_split

MANIFEST_SAMPLE_BYTES = 4096
SAMPLE_ROWS = 200
# The URI column looks wrong below this share of image file names, another column right at or above the next.
URI_SHARE_BELOW = 0.5
OTHER_SHARE_AT_LEAST = 0.8
_BINARY_KINDS = (
    (b"PAR1", "is a Parquet file: Parquet manifests are not supported yet; write it as CSV or JSON Lines (with "
              "pandas: pd.read_parquet(path).to_csv('manifest.csv', index=False))"),
    (b"PK\x03\x04", "is a ZIP archive (an .xlsx workbook?), not CSV or JSON Lines text; export it as CSV"),
    (b"\x1f\x8b", "is gzip-compressed; decompress it (gunzip) and pass the CSV or JSON Lines file"),
    (b"\xff\xfe", "is UTF-16 text; save it as UTF-8"),
    (b"\xfe\xff", "is UTF-16 text; save it as UTF-8"),
)


def binary_problem(path: str) -> str | None:
    """What a manifest is when it is not text (Parquet, ZIP, gzip, UTF-16, NUL bytes), or None."""
    with _open_binary(path) as f:
        head = f.read(MANIFEST_SAMPLE_BYTES)
    for magic, what in _BINARY_KINDS:
        if head.startswith(magic):
            return f"manifest {path} {what}"
    if b"\x00" in head:
        return f"manifest {path} holds binary data (NUL bytes), not CSV or JSON Lines text"
    return None


def _sample_rows(path: str, fmt: ManifestFormat) -> tuple[list[str] | None, list[list[str]]]:
    """The CSV's header (None without one, as the build decides: the first line names --uri_column) and up to
    SAMPLE_ROWS data rows, fields stripped."""
    header: list[str] | None = None
    rows: list[list[str]] = []
    for _, text in manifest_lines(path):
        if text is None or not text.strip():
            continue
        try:
            fields = [f.strip() for f in next(csv.reader([text], strict=True))]
        except csv.Error:
            continue
        if header is None and not rows and fmt.uri_column.lower() in (f.lower() for f in fields):
            header = fields
            continue
        rows.append(fields)
        if len(rows) >= SAMPLE_ROWS:
            break
    return header, rows


def swapped_columns_problem(path: str, fmt: ManifestFormat) -> str | None:
    """For a CSV manifest: a sentence when its image URI column holds few image file names and another column
    holds (nearly) nothing else, naming both and the fix; None otherwise (URIs without extensions included)."""
    header, rows = _sample_rows(path, fmt)
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


def folder_problem(path: str) -> str | None:
    """What is wrong with a local folder given as --manifest, or None once one image lies where the build reads
    images: FOLDER/<label>/<file>, or FOLDER/<split>/<label>/<file> (hidden files and folders skipped, as the
    build skips them)."""
    root = path.rstrip("/") or "/"
    counts: Counter[int] = Counter()
    examples: dict[int, str] = {}
    seen: set[str] = set()
    for folder, subfolders, files in os.walk(root, followlinks=True):  # class folders may be symlinks
        real = os.path.realpath(folder)
        if real in seen:  # a symlink loop
            subfolders[:] = []
            continue
        seen.add(real)
        subfolders[:] = sorted(d for d in subfolders if not d.startswith("."))
        relative = os.path.relpath(folder, root)
        parts = [] if relative == "." else relative.split(os.sep)
        images = sorted(f for f in files if not f.startswith(".") and f.lower().endswith(IMAGE_EXTENSIONS))
        if not images:
            continue
        depth = len(parts)
        if (depth == 1 and canonical_split(parts[0]) is None) or (depth == 2 and canonical_split(parts[0])):
            return None
        counts[depth] += len(images)
        examples.setdefault(depth, "/".join([*parts, images[0]]))
    expected = f"expected {root}/<label>/<file> or {root}/<split>/<label>/<file>"
    if not counts:
        return (f"folder {root} holds no image files ({', '.join(IMAGE_EXTENSIONS)}); {expected}, or pass a CSV or "
                "JSON Lines manifest")
    depth = max(counts, key=lambda d: (counts[d], -d))
    example = examples[depth]
    where = ("in the folder itself" if depth == 0 else
             f"{depth} level{'s' if depth > 1 else ''} down")
    folders = example.split("/")[:-1]
    keep = folders[:-2] if len(folders) >= 3 and canonical_split(folders[-2]) else folders[:-1]
    if depth == 1:
        expected += " (a split folder holds class folders)"
    try_this = f"; try --manifest {root}/{'/'.join(keep)}" if keep else ""
    return (f"folder {root} has no images in class folders: its images are {where} (e.g. {example}); "
            f"{expected}{try_this}")
