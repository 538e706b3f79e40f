"""One shard file, start to finish: read its images in placement order, validate, encode, stream the framed
records to a temporary file and rename it to the final name (the file itself and the files beside it:
shardsmith/shard_writer/shard_output.py; where it goes and how records are made: writer_config.py).

This module imports neither Beam nor TensorFlow (shardsmith.storage imports Beam only for a remote file), so
the shard writer processes that run it cost tens of megabytes each, not the 0.2-0.7 GB those imports take.

Guarantees: the bytes of a shard depend only on its rows; a retried or duplicated attempt writes a temporary
file of its own and renames identical bytes over the same final name, so readers never see a partial file
under a final name. Memory: one shard's rows plus MAX_IMAGES_IN_FLIGHT images.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from shardsmith import fault_injection, progress_signal, storage
from shardsmith.format.naming import shard_file_name
from shardsmith.format.record_index import RecordIndex
from shardsmith.format.row_list import ListedRow
from shardsmith.images.load_images import (
    ImageInfo,
    ImageRejected,
    check_min_side,
    inspect_image,
    ordered_bounded_map,
    read_input_file,
)
from shardsmith.images.masks import mask_png
from shardsmith.images.reencode import reencode
from shardsmith.near_duplicates.near_duplicate_search import HashedImage
from shardsmith.near_duplicates.perceptual_hash import (
    MIN_REDUCED_SIDE,
    ImageSignature,
    signature_of_bytes,
    signature_of_image,
    signature_text,
)
from shardsmith.rows import ErrorRow, ImageDigest, ImageDigests, PlacedRow, ShardResult
from shardsmith.rows.row_identity import row_identity
from shardsmith.settings import RecordSettings
from shardsmith.shard_writer.encode import image_example_chunks
from shardsmith.shard_writer.shard_output import HashedFile, ShardOutput
from shardsmith.shard_writer.writer_config import WriterConfig

STAGE = "load"
# Remote images read ahead of the writer; bounds memory per shard writer while hiding object-store latency.
# Local files are read one after the other: on a page-cached disk, threads only add GIL contention.
MAX_IMAGES_IN_FLIGHT = 16


@dataclass
class ShardOutcome:
    """What writing one shard produced: its result, the rows it rejected, and the hashes of what it wrote."""

    result: ShardResult
    errors: list[ErrorRow] = field(default_factory=list)
    digests: ImageDigests = field(default_factory=ImageDigests)
    image_sizes: list[int] = field(default_factory=list)  # source bytes of each written image (Beam metrics)
    signatures: list[HashedImage] = field(default_factory=list)  # --near_duplicates: signature and row


@dataclass(slots=True)  # one per image: a frozen dataclass's constructor would cost several times as much
class _Loaded:
    placed: PlacedRow
    data: bytes = b""  # what the record holds: the source bytes, or their re-encoding
    info: ImageInfo | None = None
    sha256: str = ""  # of the source file, always
    error: ImageRejected | None = None
    mask: bytes | None = None  # segmentation: the class mask as stored
    source_size: int = 0  # bytes of the source file
    signature: ImageSignature | None = None  # perceptual signature of the source image, when asked for


def _load(placed: PlacedRow, config: WriterConfig) -> _Loaded:
    try:
        settings = config.records
        data = read_input_file(placed.row.resolved_uri, settings.max_image_bytes, placed.row.size,
                               config.allowed_prefixes)
        sha256 = hashlib.sha256(data).hexdigest()
        changed = reencode(data, settings.reencoding, settings.max_pixels) if settings.reencoding.active else None
        if changed is not None:
            check_min_side(changed[1], settings.min_side)
            signature = signature_of_bytes(data, settings.max_pixels) if settings.perceptual_hash else None
            return _Loaded(placed, *changed, sha256, source_size=len(data), signature=signature)
        info, signature = _inspect(data, settings)
        check_min_side(info, settings.min_side)
    except ImageRejected as e:
        return _Loaded(placed, error=e)
    except OSError as e:
        return _Loaded(placed, error=ImageRejected("file cannot be read", f"{type(e).__name__}: {e}"[:300]))
    annotation = placed.row.annotation
    if annotation is None or not annotation.mask_uri:
        return _Loaded(placed, data, info, sha256, source_size=len(data), signature=signature)
    try:
        mask_bytes = read_input_file(annotation.mask_uri, config.records.max_image_bytes,
                                     allowed_prefixes=config.allowed_prefixes, what="mask")
        mask = mask_png(mask_bytes, info.height, info.width)
    except ImageRejected as e:
        return _Loaded(placed, error=e)
    except OSError as e:
        return _Loaded(placed, error=ImageRejected("mask file cannot be read", f"{type(e).__name__}: {e}"[:300]))
    return _Loaded(placed, data, info, sha256, mask=mask, source_size=len(data), signature=signature)


def _inspect(data: bytes, settings: RecordSettings) -> tuple[ImageInfo, ImageSignature | None]:
    """The image's info, and its perceptual signature when settings ask for one: from the pixels the decode
    validation holds anyway, else from a reduced decode of its own. No hashing work when not asked."""
    if not settings.perceptual_hash:
        return inspect_image(data, settings.validate, settings.max_pixels), None
    signatures: list[ImageSignature | None] = []
    info = inspect_image(data, settings.validate, settings.max_pixels, min_decoded_side=MIN_REDUCED_SIDE,
                         on_pixels=lambda image: signatures.append(signature_of_image(image)))
    return info, signatures[0] if signatures else signature_of_bytes(data, settings.max_pixels)


def _loaded_in_order(rows: list[PlacedRow], config: WriterConfig) -> Iterator[_Loaded]:
    if not any(storage.is_remote(p.row.resolved_uri) for p in rows):
        return (_load(p, config) for p in rows)
    return _loaded_with_read_ahead(rows, config)


def _loaded_with_read_ahead(rows: list[PlacedRow], config: WriterConfig) -> Iterator[_Loaded]:
    with ThreadPoolExecutor(MAX_IMAGES_IN_FLIGHT) as pool:
        yield from ordered_bounded_map(lambda p: _load(p, config), rows, pool, MAX_IMAGES_IN_FLIGHT)


def write_shard_file(config: WriterConfig, split: str, shard: int, dealt: Iterable[list[PlacedRow]]) -> ShardOutcome:
    """Writes shard `shard` of `split` from its rows (in any order, in any number of lists). A build that no
    longer holds its lock (config.lock) writes nothing: LockLost before the temporary file, and before the rename
    (the temporary file is removed)."""
    if config.lock is not None:
        config.lock.check()
    ordered = placed_in_order(dealt)
    output = shard_output(config, split, shard, ordered[0].num_shards)
    try:
        with output.open_temporary() as out:
            records = write_records(config, split, shard, ordered, out)
        index_file = output.finish(config, records.index, records.listed if config.list_rows else None)
    except BaseException:
        output.discard_temporary()  # a retry writes its own temporary file; do not leave this one behind
        raise
    return records.published(output, index_file)


def placed_in_order(dealt: Iterable[Iterable[PlacedRow]]) -> list[PlacedRow]:
    """A shard's rows, from any number of lists, in record order."""
    return sorted((p for rows in dealt for p in rows), key=lambda p: p.order_key)


def shard_output(config: WriterConfig, split: str, shard: int, num_shards: int, temp_path: str | None = None
                 ) -> ShardOutput:
    """The output of shard `shard` of `num_shards` of `split`: a new temporary file, or `temp_path`."""
    final_name = shard_file_name(config.name, split, shard, num_shards, config.records.compression, config.generation,
                                 config.file_format)
    return ShardOutput(config.files_dir, final_name, config.records.compression, temp_path)


@dataclass
class ShardRecords:
    """What writing a run of a shard's rows produced besides its bytes: the outcome's errors, digests, sizes and
    signatures; the records' label counts, manifest lines, first key and index; and their row list entries."""

    outcome: ShardOutcome
    label_counts: Counter[str] = field(default_factory=Counter)
    num_rows: int = 0
    first_key: str | None = None  # image/key/sha256 of the first record (None: no record was written)
    index: RecordIndex = field(default_factory=RecordIndex)  # offsets as framed, never read back from the file
    listed: list[ListedRow] = field(default_factory=list)

    def then(self, later: ShardRecords) -> ShardRecords:
        """These records followed by `later`'s, written right after them in the same file."""
        outcome, also = self.outcome, later.outcome
        index = RecordIndex(list(self.index.offsets), list(self.index.lengths))
        index.offsets += [offset + self.index.end for offset in later.index.offsets]
        index.lengths += later.index.lengths
        return ShardRecords(
            ShardOutcome(outcome.result, outcome.errors + also.errors, ImageDigests(outcome.digests + also.digests),
                         outcome.image_sizes + also.image_sizes, outcome.signatures + also.signatures),
            self.label_counts + later.label_counts, self.num_rows + later.num_rows,
            self.first_key if self.first_key is not None else later.first_key, index, self.listed + later.listed)

    def published(self, output: ShardOutput, index_file: str | None) -> ShardOutcome:
        """Renames the shard's file into place; the outcome of writing it."""
        num_bytes = output.publish()
        fault_injection.reached("after_shards")
        placed = self.outcome.result  # split, shard and shard count, set when the records were written
        self.outcome.result = ShardResult(placed.split, placed.shard, placed.num_shards, output.final_name,
                                          sum(self.label_counts.values()), num_bytes,
                                          dict(sorted(self.label_counts.items())), self.num_rows, output.crc32c,
                                          self.first_key, index_file)
        return self.outcome


def write_records(config: WriterConfig, split: str, shard: int, ordered: list[PlacedRow], out: HashedFile
                  ) -> ShardRecords:
    """Reads, checks and encodes the images of `ordered` (rows of shard `shard`) and writes their framed records to
    `out`, in order."""
    records = ShardRecords(ShardOutcome(ShardResult(split, shard, ordered[0].num_shards, "", 0, 0)))
    outcome, label_counts, index, listed = records.outcome, records.label_counts, records.index, records.listed
    written = progress_signal.Tally(progress_signal.IMAGES_WRITTEN)
    faults_armed = fault_injection.armed()
    frame_chunks = config.file_format.frame_chunks
    for loaded in _loaded_in_order(ordered, config):
        row = loaded.placed.row
        if loaded.error is not None:
            outcome.errors.append(ErrorRow.for_row(row, STAGE, loaded.error.reason, loaded.error.detail))
            progress_signal.add(progress_signal.IMAGES_REJECTED)
            continue
        record = image_example_chunks(row, loaded.data, loaded.info, loaded.sha256, config.records.image_mode,
                                      loaded.mask)
        outcome.digests.append(ImageDigest(loaded.sha256, split, row.uri, row.source_index, row.line))
        outcome.image_sizes.append(loaded.source_size)
        if loaded.signature is not None:
            outcome.signatures.append(HashedImage(loaded.signature, split, row.label, row.uri, row.source_index,
                                                  row.line))
        head, tail = frame_chunks(record)
        out.write_all((head, *record, tail))
        index.add(sum(map(len, record)))
        if records.first_key is None:
            records.first_key = loaded.sha256
        label_counts[row.label] += 1
        records.num_rows += len(row.lines)
        if config.list_rows:  # the signature too, so that a later night compares new images with it
            listed.append(ListedRow(row_identity(row), len(row.lines), row.label, row.size, row.uri, loaded.sha256,
                                    signature_text(loaded.signature) if loaded.signature else ""))
        written.add()
        if faults_armed:
            fault_injection.reached("mid_shard")
            fault_injection.reached(fault_injection.WRITER_KILLED)
    written.flush()
    return records
