"""A folder of class folders as input: FOLDER/<label>/<file>, or FOLDER/<split>/<label>/<file> when every top
folder is a split's name. Images (by extension) are listed in sorted order, hidden files and folders skipped; a
row's "line" is its image's position in that list, and its source the folder's path ending in FOLDER_SUFFIX ("/"),
so that an error names the image file, FOLDER/URI. An image elsewhere in the folder is an error row."""

from __future__ import annotations

import dataclasses
import os
from collections import Counter
from collections.abc import Iterator

from shardsmith import storage
from shardsmith.format.naming import canonical_split, is_remote
from shardsmith.images.image_file_names import IMAGE_EXTENSIONS
from shardsmith.manifest.row_maker import STAGE, RowMaker, utf8
from shardsmith.manifest.settings import ManifestFormat
from shardsmith.manifest.source import Source
from shardsmith.rows import FOLDER_SUFFIX, ErrorRow, ManifestRow


class ClassFolders:
    """The class-folders reader (formats.py's ManifestReader). Its names come from the folders, so it has no
    columns to sample."""

    kind = "folder"
    extensions: tuple[str, ...] = ()

    def rows(self, source: Source, fmt: ManifestFormat) -> Iterator[ManifestRow | ErrorRow]:
        root = source.path.rstrip("/")
        # The rows' source is the folder with a trailing "/": errors.jsonl and the reports then name a row by its
        # image file (FOLDER/URI, failures.py), not by a "line" of a folder.
        folder = dataclasses.replace(source, path=root + FOLDER_SUFFIX)
        maker = RowMaker(fmt, folder, base_dir=root, not_utf8_reason="file name is not valid UTF-8")
        relative = sorted(path[len(root) + 1:] for path in storage.match(root + "/**"))
        images = [r for r in relative if r.lower().endswith(IMAGE_EXTENSIONS) and not _hidden(r)]
        top_dirs = {r.split("/")[0] for r in images if "/" in r}
        split_layout = bool(top_dirs) and all(canonical_split(d) for d in top_dirs)
        for line, rel in enumerate(images, start=1):
            parts = rel.split("/")
            if split_layout and len(parts) == 3:
                split, label = parts[0], parts[1]
            elif not split_layout and len(parts) == 2:
                split, label = "", parts[0]
            else:
                layout = "<split>/<label>/<file>" if split_layout else "<label>/<file>"
                yield ErrorRow(folder.path, line, utf8(rel), "", "", STAGE, "file is not in a class folder",
                               f"expected {layout} under {root}")
                continue
            yield maker.row(line, split, rel, label)

    def input_problem(self, path: str, fmt: ManifestFormat) -> str | None:
        """folder_problem for a local folder; a gs:// folder is listed by the build itself."""
        return None if is_remote(path) else folder_problem(path)

    def sample_columns(self, path: str, limit: int) -> Iterator[dict[str, object]]:
        return iter(())


def _hidden(relative: str) -> bool:
    return any(part.startswith(".") for part in relative.split("/"))


def folder_problem(path: str) -> str | None:
    """What is wrong with a local folder given as --manifest, or None once one image lies where the build reads
    images: FOLDER/<label>/<file>, or FOLDER/<split>/<label>/<file> (hidden files and folders skipped, as the
    build skips them). Lists names until one image sits where a class folder's image sits (the whole folder only
    when none does); never reads an image."""
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
