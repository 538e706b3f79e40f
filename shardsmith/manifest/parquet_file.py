"""Parquet manifests (`.parquet`, local or gs://): the columns a CSV header names (--split_column, --uri_column,
--label_column, the task's and --feature's), matched in any case; a label column may be a list of labels for
--task multi_label. Row numbers count data rows from 1 (a Parquet file has no header line).

Only the columns a build reads are read, one batch of ROWS_IN_MEMORY rows at a time (pyarrow's
ParquetFile.iter_batches, row group after row group), its pages through a READ_BUFFER_BYTES buffer: memory stays
bounded by one batch, whatever the number of rows in the file or in one row group (pyarrow's default pre-buffering
would fetch every column chunk whole first). Rows keep the file's order. A value that is null reads as empty (an
empty URI or label is an error row); a split, URI or label that is a list or a struct where text is expected is an
error row naming the row. pyarrow (installed with Beam) is imported only when a Parquet manifest is read.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from shardsmith.errors import UsageError
from shardsmith.manifest.annotations import BOX_COLUMNS
from shardsmith.manifest.header_checks import (
    SAMPLE_ROWS,
    manifest_head,
    missing_columns_problem,
    swapped_columns_problem,
)
from shardsmith.manifest.row_maker import RowMaker, text_of
from shardsmith.manifest.settings import ManifestFormat
from shardsmith.manifest.source import Source, open_manifest
from shardsmith.rows import ErrorRow, ManifestRow

# Rows decoded at once, into Arrow and then Python values: with READ_BUFFER_BYTES, what bounds the reader's memory.
ROWS_IN_MEMORY = 8192
MAGIC = b"PAR1"
# Column chunks are read through a buffer of this size, page by page, rather than each fetched whole first.
READ_BUFFER_BYTES = 1 << 20


class ParquetManifest:
    """The Parquet reader (formats.py's ManifestReader)."""

    kind = "parquet"
    extensions = (".parquet",)

    def rows(self, source: Source, fmt: ManifestFormat) -> Iterator[ManifestRow | ErrorRow]:
        maker = RowMaker(fmt, source, not_utf8_reason="row is not valid UTF-8 text")
        keys = (fmt.split_column.lower(), fmt.uri_column.lower(), fmt.label_column.lower())
        for number, values in _rows(source.path, _wanted(fmt)):
            try:
                item = maker.object_row(number, values, keys, _container)
            except Exception as e:  # whatever a value holds, the rest of the manifest is read
                item = maker.line_error(number, "row could not be read", f"{type(e).__name__}: {e}"[:300])
            yield item

    def input_problem(self, path: str, fmt: ManifestFormat) -> str | None:
        """A file that is not Parquet, columns without --uri_column or --label_column, or columns that look
        swapped (in the first SAMPLE_ROWS rows)."""
        head = manifest_head(path)
        if not head.startswith(MAGIC):
            return (f"manifest {path} is not a Parquet file (it starts with {head[:40]!r}); a CSV manifest's name "
                    "ends in .csv, a JSON Lines one's in .jsonl")
        try:
            with _parquet(path) as parquet:
                names = parquet.schema_arrow.names
        except UsageError as e:
            return str(e)
        problem = missing_columns_problem(path, names, f"the columns {', '.join(names)[:200]!r}", fmt)
        if problem:
            return problem
        rows = [[text_of(v) for v in values.values()] for _, values in _rows(path, None, SAMPLE_ROWS)]
        return swapped_columns_problem(path, names, rows, fmt)

    def sample_columns(self, path: str, limit: int) -> Iterator[dict[str, object]]:
        """The first `limit` rows as {column name as written: value} (lists stay lists, numbers numbers)."""
        for _, values in _rows(path, None, limit, lower=False):
            yield values


def _wanted(fmt: ManifestFormat) -> set[str]:
    """The lower-cased names of the columns a build reads with `fmt`."""
    wanted = {fmt.split_column, fmt.uri_column, fmt.label_column}
    if fmt.task == "segmentation":
        wanted.add(fmt.mask_column)
    if fmt.task == "detection":
        wanted.update(("boxes", *BOX_COLUMNS))
    wanted.update(name for name, _ in fmt.features)
    return {name.lower() for name in wanted}


@contextmanager
def _parquet(path: str):
    """The open pyarrow.parquet.ParquetFile of `path`; a file pyarrow cannot read as Parquet is a UsageError."""
    import pyarrow.parquet as pq

    with open_manifest(path) as raw:
        try:
            parquet = pq.ParquetFile(raw, buffer_size=READ_BUFFER_BYTES, pre_buffer=False)
        except Exception as e:  # pyarrow.ArrowInvalid, OSError: no footer, a truncated file
            raise UsageError(f"manifest {path} is not a readable Parquet file: {_first_line(e)}") from None
        with parquet:
            yield parquet


def _rows(path: str, wanted: set[str] | None, limit: int | None = None,
          lower: bool = True) -> Iterator[tuple[int, dict[str, object]]]:
    """(row number from 1, {column name: value}) for each row, of the columns whose lower-cased name is in
    `wanted` (all when None), names lower-cased when `lower`; bytes decoded as UTF-8. A row group that cannot be
    read is a UsageError naming the rows read before it."""
    with _parquet(path) as parquet:
        columns = [n for n in parquet.schema_arrow.names if wanted is None or n.lower() in wanted]
        number = 0
        batches = parquet.iter_batches(batch_size=ROWS_IN_MEMORY, columns=columns)
        while True:
            try:
                batch = next(batches, None)
            except Exception as e:  # a corrupt page or row group: the rows after it cannot be told apart
                raise UsageError(f"manifest {path}: the rows after row {number} cannot be read: "
                                 f"{_first_line(e)}") from None
            if batch is None:
                return
            for values in batch.to_pylist():
                if number == limit:
                    return
                number += 1
                yield number, {(k.lower() if lower else k): _plain(v) for k, v in values.items()}


def _first_line(error: Exception) -> str:
    return (str(error).splitlines() or [type(error).__name__])[0][:200]


def _plain(value: object) -> object:
    """A Parquet value as a JSON Lines row would hold it: bytes decoded (undecodable ones as U+FFFD)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


def _container(value: object) -> str:
    return "a Parquet struct" if isinstance(value, dict) else "a Parquet list"
