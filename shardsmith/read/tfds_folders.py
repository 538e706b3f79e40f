"""The folders TensorFlow Datasets reads a version from: `tfds.builder_from_directories(tfds_dirs(out))`.

A version whose shards all lie in its own build folder has its TFDS files there (one folder, which
`tfds.builder_from_directory` reads too); a version spread over several build folders by --incremental nights
has one TFDS builder folder per shard set, `builds/<id>/tfds/NNNNN/` (shardsmith/format/tfds.py).

Guarantees:
- The folders returned describe exactly the version's shards: every record of every split once.
- A version TFDS cannot read fails here, in one line that says why and what reads it instead: no TFDS files
  (gzip, list or float features), files missing (a version made before they were written for it), or a version
  of several folders on gs://, whose relative file templates TensorFlow's Cloud Storage file system does not
  resolve, or a version on s3://, which TensorFlow (and so TFDS) has no file system for.
"""

from __future__ import annotations

import os

from shardsmith import storage
from shardsmith.format.naming import is_remote, join
from shardsmith.format.tfds import DATASET_INFO_FILE, tfds_builder_dirs
from shardsmith.output_folder import dataset_dir, open_version
from shardsmith.storage import is_s3


def tfds_dirs(output_dir: str | os.PathLike, version: str | None = None) -> list[str]:
    """The TFDS builder folders of `output_dir`'s published version (or of the kept `version`), in order: pass
    them to `tfds.builder_from_directories`. FileNotFoundError or ValueError, one line, when TFDS cannot read it."""
    output_dir = os.fspath(output_dir).rstrip("/")
    opened = open_version(output_dir, version)
    metadata, folder = opened.metadata, opened.folder
    files_dir = dataset_dir(folder, metadata)
    which = f"version {version}" if version else "the published version"
    relative = tfds_builder_dirs(metadata)
    if is_s3(files_dir):
        raise ValueError(f"{output_dir}: TensorFlow Datasets reads through TensorFlow's file systems, which have no "
                         "s3://; read it with shardsmith.load, or copy the version to a local folder (aws s3 sync)")
    if not relative:
        raise ValueError(f"{output_dir}: {which} has no TFDS files (TFDS cannot read --compression gzip, and list "
                         "or float features have no TFDS description); read it with shardsmith.load")
    if relative != ["."] and is_remote(files_dir):
        raise ValueError(f"{output_dir}: {which} lies in several build folders, and TensorFlow's Cloud Storage file "
                         "system does not resolve the '..' in its TFDS file templates; pass the bucket mounted "
                         "with Cloud Storage FUSE (a local path), or read it with shardsmith.load")
    dirs = [files_dir if name == "." else join(files_dir, name) for name in relative]
    for builder_dir in dirs:
        if not storage.exists(join(builder_dir, DATASET_INFO_FILE)):
            raise FileNotFoundError(
                f"{join(builder_dir, DATASET_INFO_FILE)} is missing: {which} was made before shardsmith wrote "
                "TFDS files for it; the next build or `shardsmith compact` publishes a version that has them")
    return dirs
