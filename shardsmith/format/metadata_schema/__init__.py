"""metadata.json's schema: typed entries for the whole document, and the one place that turns it into JSON and
back. Pure: dataclasses and JSON, no file access (shardsmith/format/metadata.py reads and writes the file).

Guarantees:
- `metadata_bytes(Metadata)` of a build's metadata is byte for byte what builds wrote before there was a
  schema: the same keys in the same order, indented by 2, UTF-8 as is, a final newline.
- `parse_metadata` reads every metadata.json shardsmith ever wrote (tests/data/metadata/ holds one of each
  layout): an entry a layout lacks reads as None (or its empty default) and is not written back.
- A key this version does not know is kept (`extra`) and written back where it was; a document read and written
  again keeps its key order.

The modules: entries (the schema itself, every entry defined once), json_entry (how an entry becomes JSON and back,
and MetadataError), document (the bytes: `metadata_bytes`, `parse_metadata`, `check_readable`). Code outside
imports the names below from this package.
"""

from shardsmith.format.metadata_schema.document import (
    FEATURE_KINDS,
    REQUIRED_KEYS,
    SHA256_HEX,
    check_readable,
    metadata_bytes,
    parse_metadata,
)
from shardsmith.format.metadata_schema.entries import (
    DuplicateCopy,
    DuplicateGroup,
    DuplicatesEntry,
    IncrementalEntry,
    LookAlikeLabels,
    ManifestDigestEntry,
    Metadata,
    NearDuplicatesEntry,
    ShardEntry,
    SplitEntry,
)
from shardsmith.format.metadata_schema.json_entry import MetadataError, MetadataMissing, described

__all__ = [
    "FEATURE_KINDS", "REQUIRED_KEYS", "SHA256_HEX", "DuplicateCopy", "DuplicateGroup", "DuplicatesEntry",
    "IncrementalEntry", "LookAlikeLabels", "ManifestDigestEntry", "Metadata", "MetadataError", "MetadataMissing",
    "NearDuplicatesEntry", "ShardEntry", "SplitEntry", "check_readable", "described", "metadata_bytes",
    "parse_metadata",
]
