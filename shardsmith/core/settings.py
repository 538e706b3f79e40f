"""A build's typed settings, one dataclass per concern, each taken whole by the stages that need it.

pipeline/options.py composes them from the command line into BuildOptions; the graph hands each stage its own
(keyword construction, never positional tuples), and the report gets what it writes into metadata.json as
fields, never by reading the recorded options back. Beam-free and TensorFlow-free, like the rest of the core.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardsmith.core.load_images import DEFAULT_MAX_PIXELS
from shardsmith.core.near_duplicates import DEFAULT_MAX_DISTANCE
from shardsmith.core.reencode import Reencoding

DEFAULT_SEED = 42
DEFAULT_TARGET_SHARD_MB = 128
DEFAULT_MAX_ERROR_FRACTION = 0.05
DEFAULT_MAX_IMAGE_BYTES = 64 << 20
ON_DUPLICATE_MODES = ("keep", "drop", "error")  # --on_duplicate: what to do with identical images
NEAR_DUPLICATE_MODES = ("off", "report", "drop")  # --near_duplicates: look for resized/re-encoded copies


@dataclass(frozen=True)
class PlacementSettings:
    """Where each row goes, decided before any image is read (AssignSplits, PlaceRows)."""

    seed: int = DEFAULT_SEED
    split_ratios: tuple[float, float, float] = (0.8, 0.1, 0.1)  # for rows that name no split
    num_shards: tuple[tuple[str, int], ...] = ()  # (split or "*", count); empty: from target_shard_mb
    target_shard_mb: float = DEFAULT_TARGET_SHARD_MB


@dataclass(frozen=True)
class RecordSettings:
    """How each image becomes a record (LookupSizes, WriteShards)."""

    validate: str = "decode"  # decode | header
    compression: str = "none"  # none | gzip
    max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES
    max_pixels: int = DEFAULT_MAX_PIXELS
    image_mode: str = "bytes"  # bytes | path (records hold the image's URI, not its bytes)
    reencoding: Reencoding = Reencoding()
    perceptual_hash: bool = False  # --near_duplicates report: the writer hashes what it decodes


@dataclass(frozen=True)
class CheckSettings:
    """What makes the report refuse to publish a build."""

    max_error_fraction: float = DEFAULT_MAX_ERROR_FRACTION
    on_duplicate: str = "keep"  # keep | drop | error
    near_duplicates: str = "off"  # off | report | drop
    near_duplicate_distance: int = DEFAULT_MAX_DISTANCE  # pHash bits two near duplicates may differ in
