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
- what a row's fields say beyond one label: annotations (several labels, boxes, masks, extra columns; detection's
  box lines merged into one row), label_list (a --label_file), look_alike_labels (labels that differ only in
  Unicode form or case).

Outside this package, code imports these names, never one of its modules (tests/test_import_rules.py). It imports
shardsmith.rows, shardsmith.settings, shardsmith.images (which file names are images), shardsmith.format and
shardsmith.storage; none of them imports it.
"""

from shardsmith.manifest.annotations import BOX_COLUMNS, merge_box_rows
from shardsmith.manifest.appended import (
    LINE_FORMATS,
    AppendedPlan,
    LineSelection,
    ManifestChanged,
    ManifestRead,
    valid_digest,
)
from shardsmith.manifest.formats import LineParser, ManifestParser, input_problem, sample_columns, source_kind
from shardsmith.manifest.label_list import FixedLabels, moved_ids_line, read_label_list
from shardsmith.manifest.look_alike_labels import with_look_alike_labels
from shardsmith.manifest.settings import ManifestFormat, resolve_uri
from shardsmith.manifest.source import Source
from shardsmith.manifest.sources import resolve_sources
from shardsmith.manifest.text_lines import manifest_lines, parse_numbered

__all__ = [
    "BOX_COLUMNS",
    "LINE_FORMATS",
    "AppendedPlan",
    "FixedLabels",
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
    "merge_box_rows",
    "moved_ids_line",
    "parse_numbered",
    "read_label_list",
    "resolve_sources",
    "resolve_uri",
    "sample_columns",
    "source_kind",
    "with_look_alike_labels",
]
