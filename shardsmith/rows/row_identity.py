"""A row's identity: what `--incremental` compares to tell a row already in the published version from a new one.

The identity is a hash of the row's content as the record holds it, after normalisation: its split (as written,
canonical, or assigned by the keyed hash), its URI as written, its labels in order, and its boxes, class mask's
URI and extra columns. Where the row sits in the manifest (file, line) is not part of it, so reordering a manifest
or appending to it changes nothing; a changed label or split is a different identity: one row removed, one
added.

Guarantee: the same content gives the same identity in any process, on any runner (BLAKE2b, never hash()); two
rows of different content collide with probability 2^-128.
"""

from __future__ import annotations

import hashlib
import json

from shardsmith.rows import ManifestRow

IDENTITY_BYTES = 16


def row_identity(row: ManifestRow) -> str:
    """The row's identity as 32 hex digits. The split must be assigned already (placement's AssignSplits)."""
    annotation = row.annotation
    labels = list(annotation.labels) if annotation is not None and annotation.labels else [row.label]
    content = [row.split, row.uri, labels]
    if annotation is not None:
        content += [[list(box) for box in annotation.boxes], annotation.mask_uri,
                    [[name, repr(value)] for name, value in annotation.features]]
    text = json.dumps(content, ensure_ascii=False, separators=(",", ":"))
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=IDENTITY_BYTES,
                             person=b"shardsmith-row")
    return digest.hexdigest()
