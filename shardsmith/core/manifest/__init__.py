"""Manifest reading: CSV, JSON Lines and Parquet manifests, and folders of class folders, into ManifestRows.

Beam-free and TensorFlow-free: the build's ReadManifest stage, preflight (checking the inputs), `schema` and
`inspect` all read manifests through the names below. Every data row comes out exactly once: as a ManifestRow or
as an ErrorRow saying what is wrong with it. Local files are opened directly, other URIs (gs://) through Beam's
FileSystems, imported only then: the CLI checks local manifests before it imports Beam.

The modules, by role:
- formats: the interface every format's reader keeps (rows, input_problem, sample_columns; a line format's
  line_parser) and the choice of reader by extension; ManifestParser.
- one module per format: csv_file, jsonl_file, parquet_file, class_folders.
- shared: settings (ManifestFormat, how URIs resolve), source (Source, open_manifest: the one way a manifest file
  is opened), sources (resolve_sources: --manifest values to Sources), row_maker (a row from its values, checked),
  text_lines (a text manifest's lines in bounded memory), header_checks (mistakes the first bytes, column names
  and rows show), appended (what a read of a line manifest saw; how a night parses only what was appended).
"""

from shardsmith.core.manifest.appended import (
    LINE_FORMATS,
    AppendedPlan,
    LineSelection,
    ManifestChanged,
    ManifestRead,
    valid_digest,
)
from shardsmith.core.manifest.formats import LineParser, ManifestParser, input_problem, sample_columns, source_kind
from shardsmith.core.manifest.settings import ManifestFormat, resolve_uri
from shardsmith.core.manifest.source import Source
from shardsmith.core.manifest.sources import resolve_sources
from shardsmith.core.manifest.text_lines import manifest_lines, parse_numbered

__all__ = [
    "LINE_FORMATS",
    "AppendedPlan",
    "LineParser",
    "LineSelection",
    "ManifestChanged",
    "ManifestRead",
    "valid_digest",
    "ManifestFormat",
    "ManifestParser",
    "Source",
    "input_problem",
    "manifest_lines",
    "parse_numbered",
    "resolve_sources",
    "resolve_uri",
    "sample_columns",
    "source_kind",
]
