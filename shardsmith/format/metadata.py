"""The dataset's side files, read and written here only: metadata.json, labels.txt, errors.jsonl and
near_duplicates.jsonl.

metadata.json's schema, its JSON and its parsing are shardsmith/format/metadata_schema/; `read_metadata` is the
one reader of the file (the build's summary, `load()`, `verify`, `inspect`, the output folder's scan); each
caller turns MetadataError into its own kind of failure. Text files are UTF-8 and split on "\\n" only, so a label
holding another Unicode line separator (U+2028, U+0085) reads back as written.
"""

from __future__ import annotations

import json
import pickle
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator

from shardsmith import storage
from shardsmith.format.metadata_schema import Metadata, MetadataMissing, parse_metadata
from shardsmith.format.naming import METADATA_FILE, join

# metadata.json files parsed lately, by their bytes, up to this many bytes of files: a night reads the same few (the
# published one, the kept versions' own copies) a dozen times, and one of 1,000 labels in 100 shards (3 MB) takes
# 15 ms to parse where its pickled copy takes 4 to load.
RECENT_METADATA_BYTES = 64 << 20
_recent: OrderedDict[tuple[bytes, bool], bytes] = OrderedDict()  # (file's bytes, readable) -> pickled Metadata
_recent_lock = threading.Lock()


def read_metadata(folder: str, read_bytes: Callable[[str], bytes | None] | None = None,
                  readable: bool = False) -> Metadata:
    """The metadata.json of `folder` (a dataset, or one build's folder), parsed and checked to be shardsmith's
    (with `readable`, also to hold every entry the read side takes). `read_bytes(path)` returns a file's bytes or
    None when it does not exist (default: local files and gs://, shardsmith.storage.read_bytes).

    The file is read on every call; the same bytes read lately are not parsed again: the caller gets its own copy
    of the Metadata they gave, never an object another caller holds."""
    path = join(folder, METADATA_FILE)
    data = (read_bytes or storage.read_bytes)(path)
    if data is None:
        raise MetadataMissing(f"{folder.rstrip('/')} holds no finished shardsmith dataset: {path} does not exist")
    key = (data, readable)
    with _recent_lock:
        pickled = _recent.get(key)
        if pickled is not None:
            _recent.move_to_end(key)
    if pickled is not None:
        return pickle.loads(pickled)
    metadata = parse_metadata(data, path, readable)
    if len(data) <= RECENT_METADATA_BYTES:
        with _recent_lock:
            _recent[key] = pickle.dumps(metadata, protocol=pickle.HIGHEST_PROTOCOL)
            while sum(len(held) for held, _ in _recent) > RECENT_METADATA_BYTES:
                _recent.popitem(last=False)
    return metadata


def labels_bytes(labels: Iterable[str]) -> bytes:
    """labels.txt: one label per line, in id order."""
    return "".join(label + "\n" for label in labels).encode("utf-8")


def parse_labels(data: bytes) -> list[str]:
    """labels.txt's labels, in id order."""
    text = data.decode("utf-8")
    return text.removesuffix("\n").split("\n") if text else []


def errors_bytes(errors: Iterable[dict]) -> bytes:
    """errors.jsonl: one JSON object per line (keys sorted, UTF-8 as is), in the order given."""
    return "".join(json.dumps(e, ensure_ascii=False, sort_keys=True) + "\n" for e in errors).encode("utf-8")


def reason_key(stage: object, reason: object) -> str:
    """metadata.json's `errors_by_reason` key for an error row's stage and reason (`load: image data is ...`)."""
    return f"{stage}: {reason}"


def parse_errors(data: bytes) -> list[dict]:
    """errors.jsonl's objects, in file order. Raises ValueError (json.JSONDecodeError) on a line that is not JSON."""
    return [json.loads(line) for line in data.decode("utf-8").split("\n") if line.strip()]


def stream_errors(path: str) -> Iterator[dict | None]:
    """The objects of the errors.jsonl at `path`, streamed a line at a time (memory: one line), in file order;
    None for a line that is not a JSON object (the caller decides what that means). Nothing when there is no
    such file."""
    if storage.is_remote(path) and not storage.exists(path):
        return
    try:
        reader = storage.open_read(path, buffered=True)
    except FileNotFoundError:
        return
    with reader:
        for line in iter(reader.readline, b""):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except ValueError:  # json.JSONDecodeError, or bytes that are not UTF-8
                value = None
            yield value if isinstance(value, dict) else None


def near_duplicates_bytes(pairs: Iterable[dict]) -> bytes:
    """near_duplicates.jsonl: one pair per line (keys sorted, UTF-8 as is), closest first, as given."""
    return errors_bytes(pairs)


def parse_near_duplicates(data: bytes) -> list[dict]:
    """near_duplicates.jsonl's pairs, in file order."""
    return parse_errors(data)
