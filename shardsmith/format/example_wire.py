"""A `tf.train.Example`'s protobuf wire bytes, written directly: the same bytes as protobuf's
`SerializeToString(deterministic=True)` of the message example.py declares, at a fraction of the CPU.

Building the message costs about 70 us a record on a 57 KB photo (the image is copied into the message, the
map is sorted, and each of a dozen features takes several Python-to-C calls); these functions cost under 10 us.
tests/shardsmith/format/test_example_wire.py compares both encoders' bytes on every record shape the writer makes and on
random values, the edge cases included (empty lists, negative and 64-bit ints, floats beyond float32's range, NaN).

The layout (TensorFlow's example.proto and feature.proto, proto3): Example.features (1) -> Features.feature (1),
a map<string, Feature> whose entries are written in key order, each entry holding its key (1) and its value (2);
Feature is a oneof of bytes_list (1), float_list (2) and int64_list (3), each a list whose `value` (1) is
repeated bytes, or packed float32s or varints. An empty list is still written (the oneof is set).
"""

from __future__ import annotations

import functools
import sys
from array import array
from collections.abc import Iterable, Sequence

# The field numbers of TensorFlow's example.proto and feature.proto, written here only: example.py declares the
# messages it parses with them.
EXAMPLE_FEATURES = 1  # Example.features
FEATURES_MAP = 1  # Features.feature, the map's entries
MAP_KEY, MAP_VALUE = 1, 2  # an entry's key and value
BYTES_LIST, FLOAT_LIST, INT64_LIST = 1, 2, 3  # Feature's oneof
LIST_VALUE = 1  # BytesList.value, FloatList.value, Int64List.value


def _tag(number: int) -> bytes:
    """The key of a length-delimited field (wire type 2), as every field written here is."""
    return bytes(((number << 3) | 2,))


_BYTES_LIST, _FLOAT_LIST, _INT64_LIST = _tag(BYTES_LIST), _tag(FLOAT_LIST), _tag(INT64_LIST)
_EXAMPLE_FEATURES, _FEATURES_MAP, _MAP_KEY, _MAP_VALUE = (_tag(n) for n in (EXAMPLE_FEATURES, FEATURES_MAP, MAP_KEY,
                                                                           MAP_VALUE))
_LIST_VALUE = _tag(LIST_VALUE)
_INT64_MIN, _INT64_END = -(1 << 63), 1 << 63
_UINT64 = 1 << 64
_ONE_BYTE = tuple(bytes((value,)) for value in range(0x80))
# A Feature's encoding: its length, and chunks whose concatenation is its bytes (an image is copied once, into
# the Example). Never changed once made: the repeated features below are shared by every record that holds them.
Feature = tuple[int, Sequence[bytes]]
# A value this long (an image, a mask) stays a chunk of its own in `example_chunks`: copying it into one buffer
# with the rest costs a fresh allocation, and its page faults, per record.
SEPARATE_CHUNK_BYTES = 4096
# Distinct small values kept encoded per process: a record's format, sides, channels and labels repeat over the
# records a writer makes, and each map entry's head depends only on its key and its value's length. Encoding
# them again cost more than half of a 57 KB photo's Example (tests/benchmarks/row_costs.py).
MAX_REPEATED_FEATURES = 4096
MAX_ENTRY_HEADS = 4096


def varint(value: int) -> bytes:
    """Protobuf's base-128 varint of a non-negative int below 2**64."""
    if value < 0x80:
        return _ONE_BYTE[value]
    if value < 0x4000:
        return bytes(((value & 0x7F) | 0x80, value >> 7))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def bytes_feature(values: Iterable[bytes]) -> Feature:
    """A Feature holding a BytesList. A value of SEPARATE_CHUNK_BYTES or more stays a chunk of its own."""
    chunks = [b""]
    size = 0
    for value in values:
        head = _LIST_VALUE + varint(len(value))
        chunks += (head, value)
        size += len(head) + len(value)
    chunks[0] = _BYTES_LIST + varint(size)
    size += len(chunks[0])
    if size < SEPARATE_CHUNK_BYTES:
        return size, [b"".join(chunks)]
    return size, chunks


def int64_feature(values: Iterable[int]) -> Feature:
    """A Feature holding an Int64List (packed; a negative value takes 10 bytes, as two's complement). Raises
    ValueError for a value outside int64, as protobuf does."""
    return _packed_feature(_INT64_LIST, b"".join(map(_int64_varint, values)))


def _int64_varint(value: int) -> bytes:
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    if not _INT64_MIN <= value < _INT64_END:
        raise ValueError(f"{value} is outside int64")
    return varint(value if value >= 0 else value + _UINT64)


def float_feature(values: Iterable[float]) -> Feature:
    """A Feature holding a FloatList (packed little-endian float32s; beyond float32's range becomes +-inf, as
    protobuf's own conversion gives)."""
    floats = array("f", values)
    if sys.byteorder == "big":
        floats.byteswap()
    return _packed_feature(_FLOAT_LIST, floats.tobytes())


def _packed_feature(kind: bytes, packed: bytes) -> Feature:
    list_body = _LIST_VALUE + varint(len(packed)) + packed if packed else b""
    encoded = kind + varint(len(list_body)) + list_body
    return len(encoded), [encoded]


def example_bytes(features: dict[str, Feature]) -> bytes:
    """The Example holding `features` (key -> a Feature from the functions above), the map's entries in key
    order (by code point, which is the UTF-8 byte order deterministic serialization sorts by)."""
    return b"".join(example_chunks(features))


def example_chunks(features: dict[str, Feature]) -> list[bytes]:
    """`example_bytes` as chunks whose concatenation is the Example: each value of SEPARATE_CHUNK_BYTES or more
    is a chunk of its own, never copied; whatever lies between them is joined into one chunk. The shard writer
    frames and writes the chunks of a record without joining its image into a new buffer."""
    if not features:
        return []  # no map entry: the `features` field is never set
    gathered: list = []  # lists of small pieces to join, and the large values between them
    small: list[bytes] = [b""]  # the first piece, the Example's own head, is set once the size is known
    size = 0
    for key in sorted(features):
        feature_size, feature_chunks = features[key]
        entry_head = (_repeated_entry_head if feature_size < SEPARATE_CHUNK_BYTES else _entry_head)(key, feature_size)
        small.append(entry_head)
        size += len(entry_head) + feature_size
        for chunk in feature_chunks:
            if len(chunk) < SEPARATE_CHUNK_BYTES:
                small.append(chunk)
            else:
                gathered += (small, chunk)
                small = []
    gathered.append(small)
    gathered[0][0] = _EXAMPLE_FEATURES + varint(size)
    return [b"".join(chunk) if isinstance(chunk, list) else chunk for chunk in gathered if chunk]


@functools.lru_cache(maxsize=MAX_REPEATED_FEATURES)
def repeated_int64_feature(values: tuple[int, ...]) -> Feature:
    """`int64_feature(values)` for values that recur from record to record, made once per process."""
    size, chunks = int64_feature(values)
    return size, tuple(chunks)


@functools.lru_cache(maxsize=MAX_REPEATED_FEATURES)
def repeated_text_feature(values: tuple[str, ...]) -> Feature:
    """`bytes_feature` of texts (UTF-8) that recur from record to record, made once per process."""
    size, chunks = bytes_feature(value.encode() for value in values)
    return size, tuple(chunks)


def _entry_head(key: str, feature_size: int) -> bytes:
    """A map entry up to its value's bytes: the entry's tag and length, its key field and its value's tag and
    length."""
    encoded = key.encode("utf-8")
    entry_key = _MAP_KEY + varint(len(encoded)) + encoded + _MAP_VALUE
    value_head = varint(feature_size)
    return _FEATURES_MAP + varint(len(entry_key) + len(value_head) + feature_size) + entry_key + value_head


# Only small values' heads: an image's length is new with nearly every record.
_repeated_entry_head = functools.lru_cache(maxsize=MAX_ENTRY_HEADS)(_entry_head)
