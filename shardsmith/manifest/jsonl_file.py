"""JSON Lines manifests (`.jsonl`, `.ndjson`, `.json`): one object per line, with the CSV header's names as keys.
The split, URI and label keys are matched exactly; the task's and --feature's keys in any case."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

from shardsmith.manifest.appended import ManifestRead
from shardsmith.manifest.header_checks import binary_problem
from shardsmith.manifest.row_maker import RowMaker
from shardsmith.manifest.settings import ManifestFormat
from shardsmith.manifest.source import Source
from shardsmith.manifest.text_lines import manifest_lines, parsed_lines
from shardsmith.rows import ErrorRow, ManifestRow


def _json_container(value: object) -> str:
    return "a JSON object" if isinstance(value, dict) else "a JSON list"


class JsonlManifest:
    """The JSON Lines reader (formats.py's ManifestReader)."""

    kind = "jsonl"
    extensions = (".jsonl", ".ndjson", ".json")

    def rows(self, source: Source, fmt: ManifestFormat, read: ManifestRead | None = None
             ) -> Iterator[ManifestRow | ErrorRow]:
        parser = self.line_parser(source, fmt)
        return parsed_lines(parser.maker, parser, read)

    def line_parser(self, source: Source, fmt: ManifestFormat) -> JsonlLineParser:
        return JsonlLineParser(RowMaker(fmt, source), (fmt.split_column, fmt.uri_column, fmt.label_column))

    def input_problem(self, path: str, fmt: ManifestFormat) -> str | None:
        return binary_problem(path)

    def sample_columns(self, path: str, limit: int) -> Iterator[dict[str, object]]:
        """The first `limit` lines that are objects, as {key: JSON value}; other lines are skipped (the build
        reports them)."""
        count = 0
        for _, text in manifest_lines(path):
            if count >= limit:
                return
            if text is None or not text.strip():
                continue
            try:
                obj = json.loads(text)
            except ValueError:
                continue
            if isinstance(obj, dict):
                count += 1
                yield {str(key): value for key, value in obj.items()}


@dataclass(frozen=True)
class JsonlLineParser:
    """One JSON line's row or error, as `rows` parses it: a line parser (formats.py), with no state from line to
    line."""

    maker: RowMaker
    keys: tuple[str, str, str]
    settled = True

    def __call__(self, line: int, text: str) -> ManifestRow | ErrorRow:
        return _jsonl_line(self.maker, line, text, self.keys)


def _jsonl_line(maker: RowMaker, line: int, text: str, keys: tuple[str, str, str]) -> ManifestRow | ErrorRow:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        return maker.line_error(line, "line is not valid JSON", str(e))
    if not isinstance(obj, dict):
        return maker.line_error(line, "JSON line is not an object", text.strip()[:200])
    return maker.object_row(line, obj, keys, _json_container)
