"""TFRecord framing, written and read side by side: each record is

    uint64 length | uint32 masked CRC32C of length | data | uint32 masked CRC32C of data   (little-endian)

as TensorFlow's TFRecordWriter writes it, so tf.data reads the shards. `frame` is the writer's half, and
`iter_records` (a stream) and `unframe` (one record read at its index entry) the reader's; all use the one
`masked_crc32c`.

Memory: reading holds one record (a bogus length never allocates more than the file holds: see `read_exact`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from typing import BinaryIO

READ_CHUNK = 1 << 20  # bytes read at a time while reading a record's data
HEADER_BYTES = 12  # length + its CRC
FOOTER_BYTES = 4  # the data's CRC
_CRC_MASK_DELTA = 0xA282EAD8


def masked_crc32c(data: bytes) -> int:
    """CRC32C of `data`, rotated right by 15 bits plus a constant: TFRecord's checksum."""
    import google_crc32c

    return _masked(google_crc32c.value(data))


def _masked(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + _CRC_MASK_DELTA) & 0xFFFFFFFF


def frame(record: bytes) -> tuple[bytes, bytes]:
    """(header, footer) to write around `record`: length and its masked CRC, then the data's masked CRC."""
    return frame_chunks((record,))


def frame_chunks(chunks: Sequence[bytes]) -> tuple[bytes, bytes]:
    """`frame` of the record that is the concatenation of `chunks`, without concatenating them."""
    import google_crc32c

    length = struct.pack("<Q", sum(map(len, chunks)))
    crc = 0
    for chunk in chunks:
        crc = google_crc32c.extend(crc, chunk)
    return length + struct.pack("<I", masked_crc32c(length)), struct.pack("<I", _masked(crc))


class FramingError(Exception):
    """The record stream cannot be read past this point (truncated or corrupt framing)."""

    def __init__(self, reason: str, offset: int, detail: str = ""):
        super().__init__(reason)
        self.reason = reason
        self.offset = offset
        self.detail = detail


def read_exact(stream: BinaryIO, n: int) -> bytes:
    """Up to n bytes (fewer only at the end of the stream), read in chunks so that a bogus length never
    allocates more than the file holds."""
    if n <= READ_CHUNK:
        return stream.read(n)
    parts, got = [], 0
    while got < n:
        part = stream.read(min(READ_CHUNK, n - got))
        if not part:
            break
        parts.append(part)
        got += len(part)
    return b"".join(parts)


def _checked_length(header: bytes, offset: int) -> int:
    """The data length a complete 12-byte header holds, its checksum checked."""
    length_bytes = header[:8]
    if masked_crc32c(length_bytes) != struct.unpack("<I", header[8:])[0]:
        raise FramingError("record length checksum mismatch", offset)
    return struct.unpack("<Q", length_bytes)[0]


def _check_data(data: bytes, footer: bytes, offset: int) -> None:
    if masked_crc32c(data) != struct.unpack("<I", footer)[0]:
        raise FramingError("record data checksum mismatch", offset)


def iter_records(stream: BinaryIO) -> Iterator[bytes]:
    """The records of a TFRecord stream, checking both CRCs of each; raises FramingError where the framing
    breaks. `stream` is any binary file object (already decompressing, for .gz shards)."""
    offset = 0
    while True:
        header = read_exact(stream, HEADER_BYTES)
        if not header:
            return
        if len(header) < HEADER_BYTES:
            raise FramingError("truncated record header", offset, f"{len(header)} of {HEADER_BYTES} bytes")
        length = _checked_length(header, offset)
        data = read_exact(stream, length)
        if len(data) < length:
            raise FramingError("truncated record data", offset, f"{len(data)} of {length} bytes")
        footer = read_exact(stream, FOOTER_BYTES)
        if len(footer) < FOOTER_BYTES:
            raise FramingError("truncated record data checksum", offset)
        _check_data(data, footer, offset)
        yield data
        offset += HEADER_BYTES + length + FOOTER_BYTES


def unframe(framed: bytes, offset: int) -> bytes:
    """The data of one whole framed record (header, data, footer: as an index entry's range holds it), both
    CRCs checked; FramingError (at `offset`, the record's place in its file) when the bytes are not exactly
    one intact record."""
    if len(framed) < HEADER_BYTES + FOOTER_BYTES:
        raise FramingError("truncated record", offset, f"{len(framed)} bytes")
    length = _checked_length(framed[:HEADER_BYTES], offset)
    if HEADER_BYTES + length + FOOTER_BYTES != len(framed):
        raise FramingError("record length differs from its index entry", offset,
                           f"{length} data bytes in {len(framed)} framed")
    data = framed[HEADER_BYTES:HEADER_BYTES + length]
    _check_data(data, framed[HEADER_BYTES + length:], offset)
    return data
