"""Amazon S3 (s3://bucket/key) and S3-protocol servers, through boto3: what shardsmith.storage does with an s3://
path. Imported only for one (a local or gs:// build never imports boto3).

Where the server is: boto3's own configuration, read once per process (and again when AWS_ENDPOINT_URL,
AWS_ENDPOINT_URL_S3, AWS_PROFILE or AWS_DEFAULT_REGION change): the standard AWS environment variables, the
shared config and credentials files (`~/.aws/config`, an `endpoint_url` there too), an instance's or a task's
role. The build, its shard writer processes and every reader read the same settings, so a team sets them once.

Guarantees:
- An upload creates its object only when it completes: a single PUT up to PART_BYTES, a multipart upload above
  (completed on close, aborted when the `with` block that wrote it raised, so a failed write leaves the object as
  it was). S3 has no rename: `copy` then `delete`, the copy whole when it appears.
- A stream opened for reading reads the version it opened: every request names its ETag (If-Match), so an object
  replaced under a reader raises (OSError) instead of mixing two versions' bytes.
- Bytes are read as stored: nothing is decompressed (no Content-Encoding is ever set or honoured).
- Listing is S3's, strongly consistent (read-after-write, list-after-write) since December 2020.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import threading

SCHEME = "s3://"
PART_BYTES = 16 << 20  # a multipart upload's part (S3's minimum is 5 MiB); an object this size or less is one PUT
_DELETE_BATCH = 1000  # DeleteObjects takes at most 1000 keys a request
_CONFIG_VARIABLES = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_DEFAULT_REGION", "AWS_REGION",
                     "AWS_ACCESS_KEY_ID")
_lock = threading.Lock()
_clients: dict[tuple, object] = {}


def _after_fork() -> None:
    """A forked child (a DataLoader worker, a shard writer) starts with a free lock and makes its own client."""
    global _lock
    _lock = threading.Lock()
    _clients.clear()


os.register_at_fork(after_in_child=_after_fork)


def is_s3(uri: str) -> bool:
    return uri.startswith(SCHEME)


def client():
    """boto3's S3 client, made once per process and configuration (thread-safe; a forked child makes its own)."""
    key = (os.getpid(), *(os.environ.get(name) for name in _CONFIG_VARIABLES))
    with _lock:
        made = _clients.get(key)
        if made is None:
            import boto3
            from botocore.config import Config

            # "Found credentials in environment variables." at INFO, once a process: not news to a build's log.
            logging.getLogger("botocore.credentials").setLevel(logging.WARNING)
            made = boto3.session.Session().client(
                "s3", config=Config(max_pool_connections=32, retries={"mode": "standard", "max_attempts": 5}))
            _clients.clear()
            _clients[key] = made
        return made


def has_credentials() -> bool:
    """Whether boto3 finds AWS credentials (environment, shared files, a role; it may ask an instance's metadata
    service, briefly); a broken profile or credentials file raises boto3's error."""
    import boto3

    logging.getLogger("botocore.credentials").setLevel(logging.WARNING)  # its "Found credentials in ..." line
    return boto3.session.Session().get_credentials() is not None


def split(uri: str) -> tuple[str, str]:
    """(bucket, key) of an s3:// URI; ValueError for one without a bucket."""
    bucket, _, key = uri[len(SCHEME):].partition("/")
    if not bucket:
        raise ValueError(f"{uri!r} names no bucket (s3://BUCKET/KEY)")
    return bucket, key


def error_code(error: Exception) -> str:
    """The S3 error code of a botocore ClientError ("NoSuchKey", "PreconditionFailed", "404", ...), else ""."""
    response = getattr(error, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def _missing(error: Exception) -> bool:
    return error_code(error) in ("404", "NoSuchKey", "NotFound", "NoSuchBucket")


def _client_error():
    from botocore.exceptions import ClientError

    return ClientError


def head(uri: str) -> dict | None:
    """The object's HEAD response (ContentLength, ETag, LastModified), or None when there is none."""
    bucket, key = split(uri)
    if not key:
        return None
    try:
        return client().head_object(Bucket=bucket, Key=key)
    except _client_error() as e:
        if _missing(e):
            return None
        raise


def size(uri: str) -> int:
    found = head(uri)
    if found is None:
        raise FileNotFoundError(f"{uri}: no such object")
    return int(found["ContentLength"])


def get(uri: str, byte_range: str | None = None, if_match: str | None = None) -> dict | None:
    """GetObject's response (its Body, ETag, LastModified), or None when there is no such object."""
    bucket, key = split(uri)
    extra = {"Range": byte_range} if byte_range else {}
    if if_match:
        extra["IfMatch"] = if_match
    try:
        return client().get_object(Bucket=bucket, Key=key, **extra)
    except _client_error() as e:
        if _missing(e):
            return None
        raise


def read_bytes(uri: str) -> bytes | None:
    found = get(uri)
    return None if found is None else found["Body"].read()


def read_range(uri: str, offset: int, length: int) -> bytes:
    """Bytes `offset` to `offset + length` (fewer at the end): one ranged GET."""
    if length <= 0:
        return b""
    try:
        found = get(uri, f"bytes={offset}-{offset + length - 1}")
    except _client_error() as e:
        if error_code(e) == "InvalidRange":  # at or past the end
            return b""
        raise
    if found is None:
        raise FileNotFoundError(f"{uri}: no such object")
    return found["Body"].read()


class ObjectReader(io.RawIOBase):
    """A seekable raw stream over one version of an object: each read is one ranged GET on its ETag."""

    mode = "rb"

    def __init__(self, uri: str):
        super().__init__()
        found = head(uri)
        if found is None:
            raise FileNotFoundError(f"{uri}: no such object")
        self._uri, self._size, self._etag, self._at = uri, int(found["ContentLength"]), found["ETag"], 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._at

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._at, io.SEEK_END: self._size}[whence]
        self._at = max(0, base + offset)
        return self._at

    def readinto(self, buffer) -> int:
        wanted = min(len(buffer), self._size - self._at)
        if wanted <= 0:
            return 0
        try:
            found = get(self._uri, f"bytes={self._at}-{self._at + wanted - 1}", if_match=self._etag)
        except _client_error() as e:
            if error_code(e) == "PreconditionFailed":
                raise OSError(f"{self._uri} was replaced while it was read") from None
            raise
        if found is None:
            raise FileNotFoundError(f"{self._uri} was deleted while it was read")
        data = found["Body"].read()
        buffer[:len(data)] = data
        self._at += len(data)
        return len(data)


class ObjectWriter(io.RawIOBase):
    """A stream that uploads an object: created on close (one PUT, or a multipart upload's completion), aborted
    instead when the `with` block around it raised."""

    mode = "wb"  # Beam's gzip stream (storage.gzip_writer) asks

    def __init__(self, uri: str, content_type: str = "application/octet-stream"):
        super().__init__()
        self._bucket, self._key = split(uri)
        self._type = content_type
        self._buffer = bytearray()
        self._upload_id: str | None = None
        self._parts: list[dict] = []
        self._written = 0

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._written

    def write(self, data) -> int:
        self._written += len(data)
        self._buffer += data
        while len(self._buffer) >= PART_BYTES:
            self._send_part(bytes(self._buffer[:PART_BYTES]))
            del self._buffer[:PART_BYTES]
        return len(data)

    def _send_part(self, data: bytes) -> None:
        s3 = client()
        if self._upload_id is None:
            self._upload_id = s3.create_multipart_upload(Bucket=self._bucket, Key=self._key,
                                                         ContentType=self._type)["UploadId"]
        number = len(self._parts) + 1
        sent = s3.upload_part(Bucket=self._bucket, Key=self._key, UploadId=self._upload_id, PartNumber=number,
                              Body=data)
        self._parts.append({"PartNumber": number, "ETag": sent["ETag"]})

    def close(self) -> None:
        if self.closed:
            return
        try:
            if self._upload_id is None:
                client().put_object(Bucket=self._bucket, Key=self._key, Body=bytes(self._buffer),
                                    ContentType=self._type)
            else:
                if self._buffer:
                    self._send_part(bytes(self._buffer))
                client().complete_multipart_upload(Bucket=self._bucket, Key=self._key, UploadId=self._upload_id,
                                                   MultipartUpload={"Parts": self._parts})
        except BaseException:
            self.abort()
            raise
        self._buffer = bytearray()
        super().close()

    def abort(self) -> None:
        """Drops what was written: no object is created (a multipart upload under way is aborted)."""
        if self._upload_id is not None:
            upload_id, self._upload_id = self._upload_id, None
            # An upload left incomplete costs storage until a bucket's lifecycle rule removes it; never an object.
            with contextlib.suppress(Exception):
                client().abort_multipart_upload(Bucket=self._bucket, Key=self._key, UploadId=upload_id)
        self._buffer = bytearray()
        super().close()

    def __exit__(self, kind, value, traceback) -> None:
        if kind is not None:
            self.abort()
        else:
            self.close()


def list_keys(prefix_uri: str) -> list[str]:
    """Every object's URI under `prefix_uri` (a plain prefix, not a folder: the caller adds the "/")."""
    bucket, prefix = split(prefix_uri)
    found = []
    try:
        for page in client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            found.extend(f"{SCHEME}{bucket}/{item['Key']}" for item in page.get("Contents", ()))
    except _client_error() as e:
        if _missing(e):
            return []
        raise
    return found


def has_any(prefix_uri: str) -> bool:
    """Whether any object's name starts with `prefix_uri`: one request."""
    bucket, prefix = split(prefix_uri)
    try:
        return client().list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1).get("KeyCount", 0) > 0
    except _client_error() as e:
        if _missing(e):
            return False
        raise


def _glob_regex(pattern: str) -> re.Pattern:
    """Beam's FileSystem glob (`**` across folders, `*` and `?` within one, `[...]` a class), as a regex."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 1:]:
            end = pattern.index("]", i + 1)
            inside = pattern[i + 1:end]
            out.append("[" + ("^" + re.escape(inside[1:]) if inside.startswith("!") else re.escape(inside)) + "]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z", re.S)


def match(pattern: str) -> list[str]:
    """The object URIs a glob matches (Beam's pattern rules); a pattern without wildcards matches its object."""
    first = min((pattern.find(c) for c in "*?[" if c in pattern), default=-1)
    if first < 0:
        return [pattern] if head(pattern) is not None else []
    wanted = _glob_regex(pattern)
    return [uri for uri in list_keys(pattern[:first]) if wanted.match(uri)]


def copy(source: str, destination: str) -> None:
    """A server-side copy (multipart above 5 GB, by boto3's managed transfer); the copy appears whole."""
    source_bucket, source_key = split(source)
    bucket, key = split(destination)
    client().copy({"Bucket": source_bucket, "Key": source_key}, bucket, key)


def delete(uris: list[str]) -> None:
    """Deletes objects, 1000 a request; one already gone is no error. OSError naming the first that failed."""
    by_bucket: dict[str, list[str]] = {}
    for uri in uris:
        bucket, key = split(uri)
        by_bucket.setdefault(bucket, []).append(key)
    for bucket, keys in by_bucket.items():
        for start in range(0, len(keys), _DELETE_BATCH):
            batch = keys[start:start + _DELETE_BATCH]
            answer = client().delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in batch],
                                                                    "Quiet": True})
            failed = answer.get("Errors") or []
            if failed:
                first = failed[0]
                raise OSError(f"could not delete s3://{bucket}/{first.get('Key')} ({len(failed)} object(s) in all): "
                              f"{first.get('Code')}: {first.get('Message')}")
