"""A shard file's checksum as metadata.json records it, and the one way it is computed, by writers and readers.

Builds record `crc32c`: the CRC32C (Castagnoli) of the file's bytes as stored (the `.gz` bytes of a gzip shard),
as 8 lowercase hex digits of its big-endian value. Cloud Storage keeps the same value for every object (base64
of the same 4 bytes: `gcloud storage objects describe URL --format='value(crc32c_hash)'`). Builds before it
recorded `sha256`, the file's SHA-256 as 64 hex digits; readers check whichever a shard's entry has
(`ShardChecksum.of`).

Why CRC32C: the file checksum is there to catch a damaged, truncated or replaced file (one copied in from another
build is caught by its first record's key too), which a 32-bit CRC does; it costs about a fifth of SHA-256 per
byte with the CPU's CRC32C instruction (tests/benchmarks/shard_hash_cost.py), on every byte a build writes.
What names an image is its record's own SHA-256 (`image/key/sha256`), which stays.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

CRC32C = "crc32c"
SHA256 = "sha256"
CRC32C_HEX = re.compile(r"[0-9a-f]{8}")


class Crc32c:
    """CRC32C of the bytes given to `update`, in order, as hashlib's objects give a digest."""

    def __init__(self) -> None:
        import google_crc32c

        self._extend = google_crc32c.extend
        self._crc = 0

    def update(self, data: bytes) -> None:
        self._crc = self._extend(self._crc, bytes(data) if isinstance(data, memoryview) else data)

    def hexdigest(self) -> str:
        return f"{self._crc:08x}"


# Zero bytes hashed at a time by `crc32c_of_joined`: a buffer reused, never one as long as the second file.
ZERO_CHUNK_BYTES = 1 << 20
_FINAL_XOR = 0xFFFFFFFF  # CRC32C's initial value and final XOR


def crc32c_of_joined(first: int, second: int, second_length: int) -> int:
    """The CRC32C of two byte strings one after the other, from each one's CRC32C and the second's length, without
    the bytes: the CRC is linear in its register, so it is the second's, XOR the first's register carried over
    `second_length` zero bytes (a CRC32C continued over them from the first's value with its final XOR undone,
    then redone). Costs one pass of the CRC32C instruction over that many zero bytes (about 3 ms for 50 MB)."""
    import google_crc32c

    register = first ^ _FINAL_XOR
    left = second_length
    zero_chunk = bytes(min(ZERO_CHUNK_BYTES, second_length))
    while left:
        chunk = zero_chunk if left >= len(zero_chunk) else zero_chunk[:left]
        register = google_crc32c.extend(register, chunk)
        left -= len(chunk)
    return register ^ _FINAL_XOR ^ second


@dataclass(frozen=True)
class ShardChecksum:
    """The checksum a shard's metadata entry records: its kind (`crc32c` or `sha256`) and hex value."""

    kind: str
    value: str

    @classmethod
    def of(cls, entry) -> ShardChecksum | None:
        """The checksum of a ShardEntry, or None for one written before shards had one."""
        if entry.crc32c is not None:
            return cls(CRC32C, entry.crc32c)
        if entry.sha256 is not None:
            return cls(SHA256, entry.sha256)
        return None

    def hasher(self):
        """A new digest of this kind (update, hexdigest)."""
        return Crc32c() if self.kind == CRC32C else hashlib.sha256()

    @property
    def name(self) -> str:
        return "CRC32C" if self.kind == CRC32C else "SHA-256"
