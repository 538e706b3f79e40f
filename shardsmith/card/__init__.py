"""The dataset card: one HTML page per version that a person opens from disk to see the data (splits, labels,
example images, errors, copies), what the version changed, how mixed its shards are and how fast it reads here.

    card_bytes(output_dir, build_id)   the page of a kept version (facts.py gathers, page.py renders)
    write_card(output_dir, build_id)   the page written into the version's build folder as card.html

Builds and compactions call `write_card` after their version is published and before they release the output
folder's lock, so the file is listed in the build's record and retention removes it with its folder; `shardsmith
card` writes one for an older version under the lock, or anywhere with --output. It imports neither Beam nor
TensorFlow, and reads records with the read side's TensorFlow-free reader.
"""

from __future__ import annotations

from shardsmith.card.facts import DEFAULT_PER_LABEL, gather
from shardsmith.card.page import render
from shardsmith.format.build_record import write_atomically
from shardsmith.format.naming import CARD_FILE, join
from shardsmith.output_folder import build_dir

MAX_CARD_BYTES = 5 << 20  # the bounds of facts.py, thumbnails.py and svg.py keep a page below this


def card_bytes(output_dir: str, build_id: str, split: str | None = None, per_label: int = DEFAULT_PER_LABEL) -> bytes:
    """The card of version `build_id` of `output_dir`, as HTML (UTF-8)."""
    return render(gather(output_dir.rstrip("/"), build_id, split, per_label))


def write_card(output_dir: str, build_id: str) -> str:
    """Writes the card into the version's build folder (card.html, replaced whole); returns its path. The caller
    holds the output folder's lock."""
    path = join(build_dir(output_dir.rstrip("/"), build_id), CARD_FILE)
    write_atomically(path, card_bytes(output_dir, build_id))
    return path


__all__ = ["CARD_FILE", "MAX_CARD_BYTES", "card_bytes", "write_card"]
