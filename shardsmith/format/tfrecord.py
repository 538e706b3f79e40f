"""TFRecord framing, written and read side by side: each record is

    uint64 length | uint32 masked CRC32C of length | data | uint32 masked CRC32C of data   (little-endian)

as TensorFlow's TFRecordWriter writes it, so tf.data reads the shards. `frame` is the writer's half and
`iter_records` the reader's (verify); both use the one `masked_crc32c`.

Memory: reading holds one record (a bogus length never allocates more than the file holds: see `read_exact`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import BinaryIO

READ_CHUNK = 1 << 20  # bytes read at a time while reading a record's data
HEADER_BYTES = 12  # length + its CRC
FOOTER_BYTES = 4  # the data's CRC
_CRC_MASK_DELTA = 0xA282EAD8


def masked_crc32c(data: bytes) -> int:
    """CRC32C of `data`, rotated right by 15 bits plus a constant: TFRecord's checksum."""
    import google_crc32c

    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _CRC_MASK_DELTA) & 0xFFFFFFFF


def frame(record: bytes) -> tuple[bytes, bytes]:
    """(header, footer) to write around `record`: length and its masked CRC, then the data's masked CRC."""
    length = struct.pack("<Q", len(record))
    return length + struct.pack("<I", masked_crc32c(length)), struct.pack("<I", masked_crc32c(record))


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
        length_bytes = header[:8]
        if masked_crc32c(length_bytes) != struct.unpack("<I", header[8:])[0]:
            raise FramingError("record length checksum mismatch", offset)
        length = struct.unpack("<Q", length_bytes)[0]
        data = read_exact(stream, length)
        if len(data) < length:
            raise FramingError("truncated record data", offset, f"{len(data)} of {length} bytes")
        footer = read_exact(stream, FOOTER_BYTES)
        if len(footer) < FOOTER_BYTES:
            raise FramingError("truncated record data checksum", offset)
        if masked_crc32c(data) != struct.unpack("<I", footer)[0]:
            raise FramingError("record data checksum mismatch", offset)
        yield data
        offset += HEADER_BYTES + length + FOOTER_BYTES
