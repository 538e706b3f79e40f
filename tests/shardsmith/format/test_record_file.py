"""The record file's face (shardsmith/format/record_file.py): the format a metadata.json names, TFRecord when it
names none, and the framing that every writer and reader takes from it."""

from __future__ import annotations

import io

import pytest

from shardsmith.format.metadata_schema import Metadata
from shardsmith.format.naming import is_shard_file_of, shard_file_name, shard_generation
from shardsmith.format.record_file import RECORD_FILES, TFRECORD, FramingError, record_file


def test_the_format_comes_from_metadata_json_and_defaults_to_tfrecord():
    assert record_file("tfrecord") is TFRECORD
    older = Metadata(name="d", labels=["a"], features={}, splits={})
    assert older.format is None and record_file(older.format) is TFRECORD, "metadata.json without a format"
    assert list(RECORD_FILES) == [TFRECORD.name]
    with pytest.raises(ValueError, match="'webdataset' is not one this shardsmith reads"):
        record_file("webdataset")


def test_shard_names_carry_the_formats_suffix_and_are_parsed_back():
    name = shard_file_name("d", "train", 2, 4, "gzip", 3, TFRECORD)
    assert name == "d-train.tfrecord-g3-00002-of-00004.gz"
    assert shard_generation(name) == 3 and is_shard_file_of(name, "d", "train")


def test_records_written_through_the_face_read_back_through_it_and_a_flipped_bit_is_refused():
    records = [b"first", b"", b"x" * 5000]
    out = io.BytesIO()
    offsets = []
    for record in records:
        offsets.append(out.tell())
        head, tail = TFRECORD.frame_chunks((record[:2], record[2:]))
        assert (head, tail) == TFRECORD.frame(record)
        out.write(head + record + tail)
    data = out.getvalue()
    assert list(TFRECORD.iter_records(io.BytesIO(data))) == records
    last = len(records[-1]) + TFRECORD.framing_bytes
    assert TFRECORD.unframe(TFRECORD.read_framed(io.BytesIO(data), offsets[-1], last), offsets[-1]) == records[-1]
    damaged = bytearray(data)
    damaged[offsets[-1] + TFRECORD.header_bytes] ^= 1
    with pytest.raises(FramingError, match="data checksum"):
        list(TFRECORD.iter_records(io.BytesIO(bytes(damaged))))



@pytest.mark.parametrize("file_format", list(RECORD_FILES.values()), ids=list(RECORD_FILES))
def test_every_format_s_tf_data_reader_reads_what_the_face_frames(file_format, tmp_path):
    """`load()` reads shards with the tf.data class the face names (`tf_dataset`; None: through `iter_records`):
    it gives back, in order, the records the format's framing wrote."""
    from shardsmith.read.load import tf_records

    records = [b"first", b"", b"x" * 5000]
    path = tmp_path / f"d-train.{file_format.file_suffix}-00000-of-00001"
    with open(path, "wb") as out:
        for record in records:
            head, tail = file_format.frame(record)
            out.write(head + record + tail)
    with open(path, "rb") as stream:
        assert list(file_format.iter_records(stream)) == records
    if file_format.tf_dataset is not None:
        assert [bytes(r) for r in tf_records(file_format, str(path), "").as_numpy_iterator()] == records
