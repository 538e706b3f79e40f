"""The read side: `load(D)` turns a finished shardsmith dataset into a `tf.data.Dataset` for training.

Everything comes from metadata.json, read once: the build it names (so a build published while training
reads is never mixed in: this reader keeps to the build it opened, and fails on a missing file if that build is
retired), the shard files of the split (listed, never globbed, so a stray or half-written file is never read),
the compression, and the parse spec (its "features" map, so the spec cannot drift from what the writer wrote).
What can be checked cheaply is: every shard's size and its first record's key (metadata.json's `first_key`: one
record read per shard, so a shard copied in from another build of the same size raises) before reading, its
record count at its end (a shortfall raises), and shard paths must lie in the dataset's folder. The pipeline is
the standard fast one: shard files shuffled, read in parallel by an interleave, records through a shuffle
buffer, parsed and decoded in parallel, optionally resized, batched and prefetched. Paths go through
TensorFlow's file systems, so local folders and gs:// both work; TensorFlow has no s3:// file system, so an
s3:// dataset's files are read through shardsmith.storage (boto3), its shards by a generator (`streamed_records`:
the same records and checks; an iterator over it cannot be checkpointed), and so are `--image_mode path` images
on s3:// (`read_image_file`).

TensorFlow is imported inside the functions (quietly: shardsmith/tensorflow_import.py): `import shardsmith` stays
cheap.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from shardsmith.format.example import BOX_LABEL, HEIGHT, IMAGE, LABEL, URI, WIDTH
from shardsmith.format.metadata_schema import Metadata
from shardsmith.format.record_file import TFRECORD, RecordFileFormat, record_file
from shardsmith.output_folder import open_version
from shardsmith.read.version_files import (  # noqa: F401  (DatasetChanged: what load() raises, importable here)
    DatasetChanged,
    check_shards,
    split_name,
    split_shards,
)
from shardsmith.tensorflow_import import import_tensorflow

DEFAULT_SHUFFLE_BUFFER = 1024  # records: with one shard, the only mixing an epoch of more records gets
DEFAULT_CYCLE_LENGTH = 16  # shard files read at once; more hides object-store latency, each costs a buffer
# Records parsed at once: tf.io.parse_example over a batch, with the batch's decodes planned in the same step,
# costs less a record than one record at a time (docs/performance.md, "Reading").
PARSE_BATCH = 32
_PLAN = "shardsmith/decode_plan"  # a parsed example's planned (decode, resize), taken out before it is yielded
_DTYPES = {"bytes": "string", "int64": "int64", "float": "float32"}


_first_read_log_spent = False


def _spend_first_read_log(tf) -> None:
    """TensorFlow logs one INFO line (tf_record_dataset_op.cc) the first time a process opens a TFRecord file,
    whatever the buffer_size ("unspecified, default to 262144", or "overridden by the user specified"): shown
    when TensorFlow was imported before shardsmith with its C++ INFO lines on. Spent here, once, on an empty
    file with stderr captured (exec_quietly keeps anything else written meanwhile)."""
    global _first_read_log_spent
    if _first_read_log_spent:
        return
    import tempfile

    from shardsmith.tensorflow_import import exec_quietly

    with tempfile.TemporaryDirectory(prefix="shardsmith-") as folder:
        empty = f"{folder}/empty.tfrecord"
        open(empty, "wb").close()
        exec_quietly(lambda: list(tf_records(TFRECORD, empty, "")))
    _first_read_log_spent = True


def tf_records(file_format: RecordFileFormat, files, compression: str):
    """tf.data's reader of a format's files (its `tf_dataset` class; `compression`: tf.data's "GZIP" or ""), read
    through TensorFlow's file systems with a 1 MiB buffer."""
    import tensorflow as tf

    return getattr(tf.data, file_format.tf_dataset)(files, compression_type=compression, buffer_size=1 << 20)


def counted_records(path, expected, compression: str, file_format: RecordFileFormat = TFRECORD):
    """The records of one shard file, read by its format's tf.data reader; at its end tf.data raises
    FailedPreconditionError ("expected to contain N elements") unless there were `expected`. The count is kept by
    tf.data's own cardinality check, which costs nothing a record (a scan with an assertion per record cost about
    120 us a record, a tenth of a decode)."""
    import tensorflow as tf

    records = tf_records(file_format, path, compression)
    return records.apply(tf.data.experimental.assert_cardinality(expected))


def streamed_records(path, expected, compression: str, file_format: RecordFileFormat = TFRECORD):
    """The records of one shard file read through shardsmith.storage instead of TensorFlow's file systems (which
    have no s3://): a generator over the TF-free framing reader, its shard streamed with read-ahead, parsed by
    tf.data like the rest. A shard with other than `expected` records raises at its end, as `counted_records`
    does. A generator's position cannot be saved: an iterator over it is not checkpointed (tf.data refuses)."""
    import tensorflow as tf

    from shardsmith.read.record_stream import decompressed
    from shardsmith.storage import open_read

    def records(shard: bytes):
        with open_read(shard.decode("utf-8"), read_ahead=True) as raw:
            yield from file_format.iter_records(decompressed(raw, "gzip" if compression == "GZIP" else "none"))

    shard_records = tf.data.Dataset.from_generator(records, args=(path,),
                                                   output_signature=tf.TensorSpec([], tf.string))
    return shard_records.apply(tf.data.experimental.assert_cardinality(expected))


def read_image_file(uri):
    """An `--image_mode path` record's image file: tf.io.read_file, but an s3:// one (TensorFlow has no s3:// file
    system) is read through shardsmith.storage in a py_function."""
    import tensorflow as tf

    def through_storage(given):
        from shardsmith.storage import read_bytes

        path = given.numpy().decode("utf-8")
        data = read_bytes(path)
        if data is None:
            raise FileNotFoundError(f"{path}: no such object")
        return data

    def from_s3():
        data = tf.py_function(through_storage, [uri], tf.string)
        data.set_shape([])
        return data

    return tf.cond(tf.strings.regex_full_match(uri, "s3://.*"), from_s3, lambda: tf.io.read_file(uri))


def resumed_only_on(elements, output_dir: str, build_id: str | None, split: str):
    """`elements` (load()'s last stage) with the build and split they read kept in the iterator's saved state (a
    scan's), so that a checkpoint restored into a `load()` of another build or split, whose saved positions would
    name other records in other shard files, is refused at the first element the restored pipeline makes: an
    InvalidArgumentError whose message's first line names the `version=` that reads the saved build. Elements the
    checkpoint already held (tf.data's buffers: the saved version's) come first. One comparison of two strings an
    element, in the thread that asks for it (docs/performance.md, "Reading")."""
    import tensorflow as tf

    here, output_dir = f"{build_id or ''}/{split}", os.fspath(output_dir)

    def refuse(saved):
        saved_build = tf.strings.split(saved, "/")[0]
        message = tf.strings.join([
            "the checkpoint was saved reading ", tf.strings.regex_replace(saved, "^[^/]*/", ""), " of build ",
            saved_build, " of ", output_dir, f", this dataset reads {split} of build {build_id}: resume it with "
            "load(..., version=", saved_build, ") and that split while the build is kept (`shardsmith tag` keeps "
            "it), or start the epoch over without the checkpoint"])
        with tf.control_dependencies([tf.debugging.Assert(False, [message])]):
            return tf.identity(saved)

    def check(saved, *element):
        fits = tf.logical_or(tf.equal(saved, ""), tf.equal(saved, here))
        # The message is built only for a checkpoint refused; the new state depends on the check.
        checked = tf.cond(fits, lambda: tf.constant(here), lambda: refuse(saved))
        return checked, element[0] if len(element) == 1 else element

    return elements.scan(tf.constant(""), check)


def feature_spec(metadata: Metadata) -> dict:
    """The tf.io parse spec for every key the records carry, from metadata.json's "features": one value
    (FixedLenFeature) or, for list kinds, any number (RaggedFeature: a batch parsed at once is a RaggedTensor,
    and each record taken out of it a dense 1-D tensor of its own length)."""
    import tensorflow as tf

    spec = {}
    for key, kind in metadata.features.items():
        scalar = kind.removesuffix("_list")
        dtype = getattr(tf, _DTYPES[scalar])
        spec[key] = tf.io.RaggedFeature(dtype) if scalar != kind else tf.io.FixedLenFeature([], dtype)
    return spec


def needed_spec(spec: dict, task: str) -> dict:
    """The part of a parse spec that `load()`'s `(image, target)` needs for `task`: the image (or its URI),
    its stored size (which picks the decode), the mask and the target's keys. Parsing only these skips the file
    name, the label text and the checksum of every record."""
    from shardsmith.format.example import BOX_KEYS, BOX_LABEL, MASK

    wanted = {IMAGE, URI, MASK, HEIGHT, WIDTH, *({LABEL} if task in ("classification", "multi_label") else set()),
              *((*BOX_KEYS, BOX_LABEL) if task == "detection" else ())}
    return {key: value for key, value in spec.items() if key in wanted}


def compression_type(metadata: Metadata) -> str:
    return {"none": "", "gzip": "GZIP"}[metadata.compression_or_default]


def interleave_and_shuffle(shards, open_shard: Callable, num_shards: int, *, shuffle_buffer: int | None,
                           cycle_length: int | None = None, shuffle_files: bool = True, seed: int | None = None):
    """The record order a reader sees: `shards` (a dataset of one element per shard) optionally shuffled,
    opened `cycle_length` at a time and interleaved a record at a time, then through a shuffle buffer.
    Used by `load` and by `shardsmith inspect --shuffle_plot`, so the plot shows what training reads."""
    import tensorflow as tf

    deterministic = seed is not None or not (shuffle_buffer or shuffle_files)
    if shuffle_files and num_shards > 1:
        shards = shards.shuffle(num_shards, seed=seed, reshuffle_each_iteration=True)
    cycle = max(1, min(num_shards, cycle_length or DEFAULT_CYCLE_LENGTH))
    if cycle > 1:
        records = shards.interleave(open_shard, cycle_length=cycle, block_length=1,
                                    num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
    else:
        records = shards.interleave(open_shard, cycle_length=1, block_length=1)
    if shuffle_buffer:
        records = records.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    return records


def load(
    output_dir: str,
    split: str = "train",
    batch_size: int | None = 32,
    shuffle_buffer: int | None = DEFAULT_SHUFFLE_BUFFER,
    image_size: int | Sequence[int] | None = None,
    features: bool = False,
    *,
    channels: int = 3,
    dtype: str = "uint8",
    cycle_length: int | None = None,
    shuffle_files: bool = True,
    seed: int | None = None,
    drop_remainder: bool = False,
    num_parallel_calls: int | None = None,
    version: str | None = None,
):
    """A `tf.data.Dataset` over one split of a shardsmith dataset.

    Yields `(image, target)`, or with `features=True` a dict holding every key of the records (`image/encoded`
    is still the file's bytes) plus `image`, the decoded image (and `mask` for segmentation). The target
    follows the task the dataset was built for (names of label ids in labels.txt):
    - classification: the label id (int64);
    - multi_label: a multi-hot float32 vector, one entry per label;
    - detection: {"boxes": float32 [objects, 4] as (ymin, xmin, ymax, xmax), normalized, TensorFlow's
      order; "classes": int64 [objects]} (batches of them are ragged);
    - segmentation: the class mask, uint8 (height, width, 1), resized with the image (nearest neighbour).
    A dataset built with `--image_mode path` holds `image/uri` instead of the bytes: each image is then read
    from there (in parallel, like the decoding), so its files must still be where the build found them.

    - `channels`: channels of the decoded image (3: RGB, 1: grayscale, 4: RGBA; 0: as stored, which fails
      to batch when the files differ). Decoding is `tf.io.decode_image(..., expand_animations=False)`'s: the
      first frame, every format it reads.
    - `image_size`: `(height, width)` or an int for a square: every image is resized to it (bilinear, aspect
      ratio not kept). A JPEG to be shrunk is decoded at libjpeg's reduced scale (1/2; 1/4 or 1/8 when that
      leaves twice the size, chosen per record from its stored height and width) and then resized bilinearly, or
      with an area filter when still twice the size; other formats are decoded in full and resized with
      antialiasing. The pixels stay within 3 levels (0-255, mean absolute, over a set of images) of a full decode
      and antialiased resize (shardsmith/read/tf_images.py). Without `image_size` images keep their own sizes,
      and batches of them are `tf.RaggedTensor`s.
    - `dtype`: `"uint8"` (0..255) or `"float32"` (scaled to 0..1).
    - `batch_size`: None yields single examples. `shuffle_buffer`: 0 or None reads in shard order (with
      `shuffle_files=False`, fully deterministic).
    - `seed`: fixes the file and record shuffles and makes the order deterministic (slower).
    - `version`: a kept version's build id, or a tag's name (`shardsmith versions OUT` lists both), instead of the
      published one: a model trained on a version is re-read exactly as it was for as long as --keep_builds
      keeps it, or for as long as a tag (`shardsmith tag OUT ID NAME`) pins it.
    Resuming mid-epoch (a preempted job): the iterator saves and restores with `tf.train.Checkpoint(iterator=it)`
    (tests/shardsmith/read/test_load_resume.py): a new `load()` with the same arguments, its iterator restored, reads
    the rest of the epoch, each record once. A checkpoint restored into a `load()` of another version or split stops
    with an InvalidArgumentError naming the `version=` that resumes it (pass it, with the same split, while the build is
    kept or tagged). The checkpoint holds the shuffle buffer's records (`shuffle_buffer` times the
    record size: 1024 photos of 60 KB are 60 MB).
    The dataset's `cardinality()` is known (records from metadata.json, or batches of them), so `model.fit`
    needs no `steps_per_epoch`; `.repeat()`, `.filter()` or `.take()` on it change that as tf.data does.
    """
    tf = import_tensorflow()

    from shardsmith.format.example import BOX_KEYS, MASK
    from shardsmith.read.tf_images import decode_full, decode_plan, decode_planned, to_dtype

    if dtype not in ("uint8", "float32"):
        raise ValueError(f"dtype must be 'uint8' or 'float32', not {dtype!r}")
    if channels not in (0, 1, 3, 4):
        raise ValueError(f"channels must be 0, 1, 3 or 4, not {channels!r}")
    from shardsmith.storage import is_s3, read_bytes_with_tensorflow

    # metadata.json read through TensorFlow's file systems, like the shards
    opened = open_version(output_dir, version, read_bytes_with_tensorflow)
    folder, metadata = opened.folder, opened.metadata
    shards = split_shards(folder, metadata, split_name(split, metadata))
    if not shards:
        raise ValueError(f"split {split!r} has no shard files")
    compression = compression_type(metadata)
    check_shards(shards, compression)
    _spend_first_read_log(tf)
    spec = feature_spec(metadata)
    task = metadata.task_or_default
    num_labels = len(metadata.labels)
    from shardsmith.read.images import image_size as size_of

    size = size_of(image_size)
    parallel = num_parallel_calls or tf.data.AUTOTUNE
    deterministic = seed is not None or not (shuffle_buffer or shuffle_files)

    file_format = record_file(metadata.format)
    # TensorFlow has no s3:// file system; a format without a tf.data reader is streamed through its own framing
    through_storage = is_s3(folder) or file_format.tf_dataset is None

    def open_shard(path, expected):
        if through_storage:
            return streamed_records(path, expected, compression, file_format)
        return counted_records(path, expected, compression, file_format)

    files = tf.data.Dataset.from_tensor_slices(([s.path for s in shards],
                                                tf.constant([s.entry.num_examples for s in shards], tf.int64)))
    records = interleave_and_shuffle(
        files, open_shard, len(shards), shuffle_buffer=shuffle_buffer,
        cycle_length=cycle_length, shuffle_files=shuffle_files, seed=seed,
    )
    decode_spec = spec if features else needed_spec(spec, task)
    planned = size is not None and HEIGHT in decode_spec and WIDTH in decode_spec

    def parse_batch(serialized):
        example = tf.io.parse_example(serialized, decode_spec)
        if planned:
            example[_PLAN] = tf.stack(decode_plan(example[HEIGHT], example[WIDTH], size), axis=-1)
        return example

    def decode(example):
        plan = example.pop(_PLAN, None)
        encoded = example[IMAGE] if IMAGE in example else read_image_file(example[URI])
        mask = tf.io.decode_png(example[MASK], channels=1) if MASK in example else None
        if size is not None:
            if plan is None:
                plan = decode_plan(tf.constant(-1, tf.int64), tf.constant(-1, tf.int64), size)
            image = to_dtype(decode_planned(encoded, (plan[0], plan[1]), size, channels), dtype)
            if mask is not None:
                mask = tf.image.resize(mask, size, method="nearest")
        else:
            image = decode_full(encoded, channels)
            if dtype == "float32":
                image = tf.cast(image, tf.float32) / 255.0
        if features:
            return {**example, "image": image, **({"mask": mask} if mask is not None else {})}
        return image, _target(example, mask)

    def _target(example, mask):
        if task == "multi_label":
            return tf.reduce_max(tf.one_hot(example[LABEL], num_labels, dtype=tf.float32), axis=0)
        if task == "detection":
            xmin, ymin, xmax, ymax = (example[key] for key in BOX_KEYS)
            return {"boxes": tf.stack([ymin, xmin, ymax, xmax], axis=-1),  # TensorFlow's order
                    "classes": example[BOX_LABEL]}
        if task == "segmentation":
            return mask
        return example[LABEL]

    # Parsed PARSE_BATCH at a time (and their decodes planned), then decoded one by one. The interleave and the
    # batches hide how many records there are; metadata.json knows (and counted_records fails a shard that
    # disagrees). Known, it survives map and batch, so Keras sees an epoch's batches and never runs out.
    examples = (records.batch(PARSE_BATCH).map(parse_batch, num_parallel_calls=parallel, deterministic=deterministic)
                .unbatch().apply(tf.data.experimental.assert_cardinality(sum(s.entry.num_examples for s in shards))))
    dataset = examples.map(decode, num_parallel_calls=parallel, deterministic=deterministic)
    fixed_shapes = size is not None and not (task == "detection" or (features and any(
        kind.endswith("_list") for kind in metadata.features.values())))
    if batch_size:
        if not fixed_shapes and batch_size > 1:
            dataset = dataset.ragged_batch(batch_size, drop_remainder=drop_remainder)
        else:
            dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
    dataset = resumed_only_on(dataset.prefetch(tf.data.AUTOTUNE), output_dir, opened.build_id or metadata.build_id,
                              split)
    if through_storage:  # a generator's position is not saved: a checkpoint of the iterator fails, never resumes wrong
        refuse = tf.data.Options()
        refuse.experimental_external_state_policy = tf.data.experimental.ExternalStatePolicy.FAIL
        dataset = dataset.with_options(refuse)
    return dataset
