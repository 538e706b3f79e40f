"""Reading from an object store with latency: the shards against the same images as separate objects
(docs/performance.md, "Reading from an object store"). Not run by CI.

    python tests/benchmarks/object_store.py                       # 2,000 photos, 30 ms, 3 rounds: ~10 min on 2 cores
    python tests/benchmarks/object_store.py --images 4000 --latency_ms 100 --rounds 3
    python tests/benchmarks/object_store.py --only tf-shards,tf-objects --tf_env GCS_READ_CACHE_BLOCK_SIZE_MB=1

The store is gcp-storage-emulator (the real local Cloud Storage server the test suite uses, JSON API, in memory)
on 127.0.0.1, its HTTP server made a ThreadingHTTPServer (the one it ships serves one request at a time, which
no object store does). In front of it runs a small reverse proxy (`_proxy`, this file, standard library only)
that holds every HTTP request for --latency_ms before forwarding it: the time a real store takes to start
answering. Bandwidth is not limited (loopback). Every reader reaches the store only through the proxy:

- Python clients (Beam's GCS client, which shardsmith.storage uses, and google-cloud-storage) through
  STORAGE_EMULATOR_HOST=http://127.0.0.1:<proxy>, plain HTTP, as the test suite points them at the emulator;
- TensorFlow's own GCS file system (C++, libcurl), which has its endpoints compiled in
  (https://www.googleapis.com/storage/v1/ and https://storage.googleapis.com/) and no setting to change them,
  through libcurl's standard `https_proxy`: it sends `CONNECT storage.googleapis.com:443` to the proxy, which
  answers TLS itself with a certificate for those two names from a certificate authority made here (libcurl
  trusts it through CURL_CA_BUNDLE, which TensorFlow reads) and forwards the requests inside the tunnel to the
  emulator. No name is resolved and nothing leaves 127.0.0.1: the proxy forwards everything to the emulator
  whatever host a client asks for. TensorFlow runs anonymously (NO_GCE_CHECK=true, no credentials).

The proxy keeps client connections alive (HTTP/1.1) and opens a new loopback connection to the emulator for
each request (the emulator answers HTTP/1.0); libcurl in TensorFlow opens a new connection (and TLS session) for
each request, as it does against Cloud Storage. What this does not show: a real store's bandwidth, its variance
and tail latency, TLS to the Python clients (they speak plain HTTP to the proxy), and a store that costs this
machine no CPU: the emulator and the proxy run on the same cores as the readers, and their CPU seconds are
printed with every run. The emulator also drops its metadata snapshot (a JSON dump of every object's metadata
after each upload, for a restart of a server on disk: quadratic in the objects, and not safe across threads).

Built once and cached in --workdir: a corpus of real-photo JPEG crops (corpora.make_corpus, kind "photos",
0.3-0.5 MP, --images of them, 90% train) and its dataset (`python -m pipeline.cli build`, --target_shard_mb
16 by default so that the train split has several shards, as a large dataset has; the build's default is 128).
The emulator and the proxy start once; the dataset's folder (metadata.json and builds/<id>/, as the build wrote
it) is uploaded to gs://shardsmith-bench/dataset/ and each train image the build kept to
gs://shardsmith-bench/images/<its path>, through the proxy (the emulator records each object's mediaLink, where
Beam's reader downloads it from, with the host the upload named). Then each contender reads one epoch of the train
split in its own process, decoded and resized to --image_size (224), in batches of --batch (64):

- `torch-shards`: `shardsmith.torch.StreamingShardDataset("gs://.../dataset", "train", image_size=224)` in a
  `DataLoader(batch_size=64, num_workers=2)`;
- `torch-objects`: a map-style `Dataset` over the train images' objects, each `blob.download_as_bytes()`
  (google-cloud-storage, one client a worker) and `shardsmith.read.images.decode_image` (Pillow with `draft`,
  bilinear resize: the shards' own decode), in a `DataLoader(batch_size=64, shuffle=True, num_workers=2)`;
- `tf-shards`: `shardsmith.load("gs://.../dataset", "train", batch_size=64, image_size=224)` (and
  `cycle_length=` --cycle_length), through TensorFlow's GCS file system;
- `tf-objects`: `tf.data.Dataset.from_tensor_slices(paths).shuffle(n).map(read_file, decode_image, resize,
  num_parallel_calls=AUTOTUNE).batch(64).prefetch(AUTOTUNE)` through TensorFlow's GCS file system, decoded the
  way the usual recipe does (`tf.io.decode_image`, then `tf.image.resize(..., antialias=True)` and a cast);
- `records-shards` (only when --only names it): `shardsmith.records("gs://.../dataset", "train")` streamed in
  one process, nothing decoded: the reads and the CRC checks alone.

--tf_env NAME=VALUE sets an environment variable for the TensorFlow contenders (TensorFlow's GCS settings, as
GCS_READ_CACHE_BLOCK_SIZE_MB); --proxy_log PATH has the proxy write a line per request.

Timed: `setup` is the reader's construction (metadata.json read, `load()`'s shard checks; nothing for the
objects, whose list is known); `epoch` from asking for the first batch to the last one, which includes starting
DataLoader workers. Before it, a TensorFlow child decodes one local JPEG through tf.data, so that TensorFlow's
own start-up is in neither tf.data figure. Contenders alternate, a different order each round (--rounds, 3).
Printed: every run (images/s over the epoch, setup, the requests and bytes the proxy saw, the reader's CPU
seconds with its DataLoader workers, the emulator's and proxy's, the largest reader process's peak RSS), then a
table of medians and the ratios of each reader to its separate-objects counterpart (target: 5x). A run fails
when fewer bytes than the train images' went through the proxy (a read that went around it) or the emulator
failed a request. The servers must answer within SERVER_START_S and each run end within RUN_DEADLINE_S; every
process started here ends with the benchmark (killed at exit, or on its own when its parent is gone).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import http.server
import json
import os
import signal
import socket
import socketserver
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

BUCKET = "shardsmith-bench"
CONTENDERS = ("torch-shards", "torch-objects", "tf-shards", "tf-objects", "records-shards")
DEFAULT_CONTENDERS = CONTENDERS[:4]
PAIRS = (("torch-shards", "torch-objects"), ("tf-shards", "tf-objects"))
TLS_HOSTS = ("www.googleapis.com", "storage.googleapis.com")  # TensorFlow's compiled-in GCS endpoints
STATS_PATH = "/__latency_proxy_stats"  # answered by the proxy itself, at once
SERVER_START_S = 30  # the emulator or the proxy answers within this, or the benchmark stops
RUN_DEADLINE_S = 900  # one contender's epoch; a run that takes longer is stuck
BUILD_DEADLINE_S = 1800
_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization", "te",
               "trailer", "transfer-encoding", "upgrade", "content-length"}


# ------------------------------------------------------------------------------------------- the latency proxy

class _ProxyServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256

    def __init__(self, upstream_port: int, latency_s: float, tls: ssl.SSLContext, log: Path | None):
        super().__init__(("127.0.0.1", 0), _ProxyHandler)
        self.upstream_port, self.latency_s, self.tls = upstream_port, latency_s, tls
        self.log = log.open("a", buffering=1) if log else None
        self.lock = threading.Lock()
        self.stats = {"requests": 0, "bytes": 0, "connections": 0, "tunnels": 0, "errors": 0}

    def count(self, **added: int) -> None:
        with self.lock:
            for key, value in added.items():
                self.stats[key] += value


class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    """One client connection: plain HTTP requests (a reverse proxy), or a CONNECT tunnel whose TLS it answers
    itself; each request held for the latency, then forwarded to the emulator and its answer streamed back."""

    protocol_version = "HTTP/1.1"
    timeout = 60  # an idle kept-alive connection is closed, and its thread ends
    # TCP_NODELAY: the headers and the body go out as separate writes, and with Nagle's algorithm the body would
    # wait for the client's delayed ACK of the headers (about 40 ms a request on loopback, measured: 48 ms a
    # small download through the proxy at 0 ms, 1.8 ms straight to the emulator).
    disable_nagle_algorithm = True
    server: _ProxyServer

    def setup(self) -> None:
        super().setup()
        self.server.count(connections=1)

    def do_CONNECT(self) -> None:  # noqa: N802
        self.send_response(200, "Connection established")
        self.end_headers()
        tls = self.server.tls.wrap_socket(self.connection, server_side=True)
        self.connection, self.request = tls, tls
        self.rfile = tls.makefile("rb", self.rbufsize)
        self.wfile = socketserver._SocketWriter(tls)  # type: ignore[attr-defined]
        self.close_connection = False  # go on reading requests, now inside the tunnel
        self.server.count(tunnels=1)

    def do_GET(self) -> None:  # noqa: N802
        if self.path == STATS_PATH:
            with self.server.lock:
                data = json.dumps(self.server.stats).encode()
            self._answer(200, data)
            return
        self._forward()

    def do_HEAD(self) -> None:  # noqa: N802
        self._forward()

    def do_POST(self) -> None:  # noqa: N802
        self._forward()

    def do_PUT(self) -> None:  # noqa: N802
        self._forward()

    def do_PATCH(self) -> None:  # noqa: N802
        self._forward()

    def do_DELETE(self) -> None:  # noqa: N802
        self._forward()

    def _answer(self, status: int, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self._answer(501, b"chunked request bodies are not forwarded")
            self.close_connection = True
            return
        body = self.rfile.read(length) if length else None
        time.sleep(self.server.latency_s)
        parts = urlsplit(self.path)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
        if body is not None:
            headers["Content-Length"] = str(len(body))
        upstream = http.client.HTTPConnection("127.0.0.1", self.server.upstream_port, timeout=120)
        try:
            try:
                upstream.connect()
                upstream.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                upstream.request(self.command, path, body=body, headers=headers)
                response = upstream.getresponse()
            except (OSError, http.client.HTTPException) as e:  # the emulator stopped, or failed this request
                self.server.count(errors=1)
                self._answer(502, f"the emulator did not answer: {e!r}".encode())
                self.close_connection = True
                return
            data_length = response.getheader("Content-Length")
            data = None if data_length is not None else response.read()
            size = int(data_length) if data is None else len(data)
            self.send_response(response.status, response.reason)
            for key, value in response.getheaders():
                if key.lower() not in _HOP_BY_HOP and key.lower() not in ("server", "date"):
                    self.send_header(key, value)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            sent = 0
            if self.command != "HEAD":
                if data is not None:
                    self.wfile.write(data)
                    sent = len(data)
                else:
                    while chunk := response.read(1 << 20):
                        self.wfile.write(chunk)
                        sent += len(chunk)
            self.server.count(requests=1, bytes=sent)
            if self.server.log:
                with self.server.lock:
                    self.server.log.write(f"{time.time():.3f} {self.command} {path[:160]} "
                                          f"range={self.headers.get('Range', '-')} {response.status} {sent}\n")
        finally:
            upstream.close()

    def log_message(self, format: str, *args) -> None:  # noqa: A002
        pass



def serve_proxy(upstream_port: int, latency_ms: float, cert: Path, key: Path, port_file: Path,
                log: Path | None = None) -> None:
    """Runs the latency proxy until SIGTERM (or its parent dies): writes its port to `port_file` once it listens;
    with `log`, a line for each request forwarded (time, method, path, Range header, status, bytes)."""
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    server = _ProxyServer(upstream_port, latency_ms / 1000, tls, log)
    parent = os.getppid()

    def stop(*_) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)

    def watch_parent() -> None:  # an orphaned proxy stops by itself
        while os.getppid() == parent:
            time.sleep(1)
        stop()

    threading.Thread(target=watch_parent, daemon=True).start()
    port_file.write_text(str(server.server_address[1]))
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()


# ------------------------------------------------------------------------------------------------ certificates

def make_certificates(folder: Path) -> tuple[Path, Path, Path]:
    """(CA certificate, server certificate, server key), PEM, made fresh in `folder`: a certificate authority
    that exists only here and a certificate it signs for TensorFlow's GCS host names (TLS_HOSTS)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "shardsmith benchmark CA (local only)")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
          .not_valid_after(now + datetime.timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    leaf = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, TLS_HOSTS[0])]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(h) for h in TLS_HOSTS]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths


# ----------------------------------------------------------------------------------------------------- servers

_EMULATOR = """
import http.server, os, sys, threading, time
parent = os.getppid()
def watch_parent():  # an orphaned emulator stops by itself
    while os.getppid() == parent:
        time.sleep(1)
    os._exit(0)
threading.Thread(target=watch_parent, daemon=True).start()
class Threaded(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256
http.server.HTTPServer = Threaded  # gcp_storage_emulator.server looks it up when it starts
from gcp_storage_emulator.storage import Storage
# Each upload snapshots every object's metadata as JSON (its .meta file, for a restart; O(objects) an upload, and
# not safe across threads); an in-memory server is never restarted, and reads never look at it.
Storage._write_config_to_file = lambda self: None
from gcp_storage_emulator.__main__ import main
sys.exit(main(["start", "--host", "127.0.0.1", "--port", sys.argv[1], "--in-memory", "--quiet"]))
"""


@dataclass
class Servers:
    emulator: str  # http://127.0.0.1:PORT, straight to the emulator
    proxy: str  # http://127.0.0.1:PORT, the latency proxy
    ca: Path
    processes: dict[str, subprocess.Popen]

    def cpu_seconds(self) -> dict[str, float]:
        """User + system CPU seconds each server process has used so far (/proc)."""
        ticks = os.sysconf("SC_CLK_TCK")
        out = {}
        for name, process in self.processes.items():
            fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
            out[name] = (int(fields[11]) + int(fields[12])) / ticks
        return out

    def proxy_stats(self) -> dict[str, int]:
        with urllib.request.urlopen(self.proxy + STATS_PATH, timeout=10) as response:
            return json.loads(response.read())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(process: subprocess.Popen) -> None:
    """Ends a process this benchmark started, and its process group (it was started in a session of its own)."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _wait_for(url: str, process: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + SERVER_START_S
    while True:
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with code {process.returncode}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not answer within {SERVER_START_S} s")
        time.sleep(0.1)


@contextlib.contextmanager
def servers(latency_ms: float, proxy_log: Path | None = None) -> Iterator[Servers]:
    """The emulator and the latency proxy in front of it, on 127.0.0.1, started fresh and stopped at the end."""
    processes: dict[str, subprocess.Popen] = {}
    with tempfile.TemporaryDirectory(prefix="shardsmith-object-store-") as folder:
        try:
            ca, cert, key = make_certificates(Path(folder))
            port = _free_port()
            processes["emulator"] = subprocess.Popen([sys.executable, "-c", _EMULATOR, str(port)],
                                                     stdout=subprocess.DEVNULL, start_new_session=True)
            emulator = f"http://127.0.0.1:{port}"
            _wait_for(emulator + "/", processes["emulator"], "gcp-storage-emulator")
            port_file = Path(folder) / "proxy.port"
            processes["proxy"] = subprocess.Popen(
                [sys.executable, __file__, "_proxy", "--upstream_port", str(port), "--latency_ms", str(latency_ms),
                 "--cert", str(cert), "--key", str(key), "--port_file", str(port_file),
                 *(["--log", str(proxy_log)] if proxy_log else [])], start_new_session=True)
            deadline = time.monotonic() + SERVER_START_S
            while not port_file.exists() or not port_file.read_text():
                if processes["proxy"].poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the latency proxy did not start")
                time.sleep(0.05)
            proxy = f"http://127.0.0.1:{port_file.read_text()}"
            _wait_for(proxy + STATS_PATH, processes["proxy"], "the latency proxy")
            yield Servers(emulator, proxy, ca, processes)
        finally:
            for process in processes.values():
                _stop(process)


# ------------------------------------------------------------------------------------------ dataset and upload

def build_dataset(corpus, workdir: Path, target_shard_mb: int) -> Path:
    """The corpus built once with `python -m pipeline.cli build` (cached: reused while its metadata.json is
    there)."""
    out = workdir / f"object-store-{corpus.root.name}-s{target_shard_mb}" / "out"
    if (out / "metadata.json").exists():
        print(f"dataset: reusing {out}")
        return out
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "pipeline.cli", "build", "--manifest", str(corpus.full), "--output_dir",
                    str(out), "--name", "bench", "--target_shard_mb", str(target_shard_mb)], check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL, timeout=BUILD_DEADLINE_S)
    print(f"dataset: built {out} in {time.monotonic() - started:.0f} s")
    return out


def train_objects(corpus, out: Path) -> list[tuple[str, int]]:
    """(object name, label id) of each train image the build kept (the rows errors.jsonl names are left out, as a
    user's folder would not hold them): the same images as the dataset's train split."""
    import csv

    from shardsmith.format.naming import ERRORS_FILE
    from shardsmith.output_folder.layout import published_dir

    errors = Path(published_dir(str(out))) / ERRORS_FILE
    rejected = {json.loads(line)["uri"] for line in errors.read_text().splitlines() if line.strip()}
    with Path(corpus.full).open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["split"] == "train" and r["image_uri"] not in rejected]
    labels = {label: i for i, label in enumerate(sorted({r["label"] for r in rows}))}
    return [(f"images/{r['image_uri']}", labels[r["label"]]) for r in rows]


def upload(proxy: str, out: Path, corpus, objects: list[tuple[str, int]]) -> tuple[int, int]:
    """Uploads the dataset's folder to gs://BUCKET/dataset/ and the images to gs://BUCKET/images/... (not timed),
    through the proxy: the emulator records each object's mediaLink (where a client that fetched the object's
    metadata downloads it, as Beam's reader does) from the upload's Host, so it names the proxy; returns
    (objects, bytes) uploaded."""
    from google.cloud import storage

    os.environ["STORAGE_EMULATOR_HOST"] = proxy
    local = threading.local()

    def bucket():
        if not hasattr(local, "bucket"):
            local.bucket = storage.Client.create_anonymous_client().bucket(BUCKET)
        return local.bucket

    storage.Client.create_anonymous_client().create_bucket(BUCKET)
    files = [(f"dataset/{p.relative_to(out).as_posix()}", p) for p in sorted(out.rglob("*")) if p.is_file()]
    files += [(name, Path(corpus.root) / name.removeprefix("images/")) for name, _ in objects]

    def put(item: tuple[str, Path]) -> int:
        data = item[1].read_bytes()
        bucket().blob(item[0]).upload_from_string(data)
        return len(data)

    with ThreadPoolExecutor(8) as pool:
        sizes = list(pool.map(put, files))
    return len(sizes), sum(sizes)


# ------------------------------------------------------------------------------------------------- contenders

def _torch_shards(uri: str, size: int, batch: int) -> tuple[float, int, float]:
    import torch
    from apache_beam.internal.gcp import auth

    from shardsmith.torch import StreamingShardDataset

    auth._Credentials._credentials_init, auth._Credentials._credentials = True, None  # anonymous, at once
    started = time.perf_counter()
    dataset = StreamingShardDataset(uri, "train", image_size=size)
    setup = time.perf_counter() - started
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch, num_workers=2)
    started = time.perf_counter()
    images = sum(len(labels) for _, labels in loader)
    return setup, images, time.perf_counter() - started


def _torch_objects(objects: list[tuple[str, int]], size: int, batch: int) -> tuple[float, int, float]:
    import torch

    from shardsmith.read.images import decode_image

    class ImageObjects(torch.utils.data.Dataset):
        """One object a sample, downloaded with google-cloud-storage (one client per worker process)."""

        bucket = None

        def __len__(self) -> int:
            return len(objects)

        def __getitem__(self, i: int):
            if ImageObjects.bucket is None:
                from google.cloud import storage

                ImageObjects.bucket = storage.Client.create_anonymous_client().bucket(BUCKET)
            name, label = objects[i]
            data = ImageObjects.bucket.blob(name).download_as_bytes()
            return torch.from_numpy(decode_image(data, size)).permute(2, 0, 1), label

    loader = torch.utils.data.DataLoader(ImageObjects(), batch_size=batch, shuffle=True, num_workers=2)
    started = time.perf_counter()
    images = sum(len(labels) for _, labels in loader)
    return 0.0, images, time.perf_counter() - started


def _tf_warm_up(tf, size: int) -> None:
    """TensorFlow's start-up (kernels, thread pools) paid before the timing: one local JPEG through a tf.data
    map that decodes and resizes it."""
    import io

    from PIL import Image

    data = io.BytesIO()
    Image.new("RGB", (64, 48), (90, 120, 150)).save(data, "JPEG")
    dataset = tf.data.Dataset.from_tensors(tf.constant(data.getvalue())).map(
        lambda encoded: tf.image.resize(tf.io.decode_image(encoded, channels=3, expand_animations=False),
                                        (size, size), antialias=True))
    list(dataset)


def _tf_shards(uri: str, size: int, batch: int, cycle_length: int | None) -> tuple[float, int, float]:
    import shardsmith
    from shardsmith.tensorflow_import import import_tensorflow

    tf = import_tensorflow()
    _tf_warm_up(tf, size)
    started = time.perf_counter()
    dataset = shardsmith.load(uri, "train", batch_size=batch, image_size=size, cycle_length=cycle_length)
    setup = time.perf_counter() - started
    started = time.perf_counter()
    images = sum(int(labels.shape[0]) for _, labels in dataset)
    return setup, images, time.perf_counter() - started


def _tf_objects(objects: list[tuple[str, int]], size: int, batch: int) -> tuple[float, int, float]:
    from shardsmith.tensorflow_import import import_tensorflow

    tf = import_tensorflow()
    _tf_warm_up(tf, size)
    paths = tf.constant([f"gs://{BUCKET}/{name}" for name, _ in objects])
    labels = tf.constant([label for _, label in objects], tf.int64)

    def parse(path, label):  # load()'s decode and resize
        image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
        image = tf.image.resize(image, (size, size), antialias=True)
        return tf.cast(tf.clip_by_value(tf.round(image), 0.0, 255.0), tf.uint8), label

    started = time.perf_counter()
    dataset = (tf.data.Dataset.from_tensor_slices((paths, labels)).shuffle(len(objects))
               .map(parse, num_parallel_calls=tf.data.AUTOTUNE).batch(batch).prefetch(tf.data.AUTOTUNE))
    setup = time.perf_counter() - started
    started = time.perf_counter()
    images = sum(int(labels.shape[0]) for _, labels in dataset)
    return setup, images, time.perf_counter() - started


def _records_shards(uri: str) -> tuple[float, int, float]:
    """The train split's records streamed in one process, CRCs checked, nothing decoded: the reads alone."""
    from apache_beam.internal.gcp import auth

    import shardsmith

    auth._Credentials._credentials_init, auth._Credentials._credentials = True, None
    started = time.perf_counter()
    records = shardsmith.records(uri, "train")
    setup = time.perf_counter() - started
    started = time.perf_counter()
    count = sum(1 for _ in records)
    return setup, count, time.perf_counter() - started


def run_contender(name: str, objects_file: Path, size: int, batch: int, cycle_length: int | None = None) -> dict:
    """One epoch of one contender, in this process (a child of the benchmark)."""
    uri = f"gs://{BUCKET}/dataset"
    objects = [tuple(o) for o in json.loads(objects_file.read_text())]
    if name == "torch-shards":
        setup, images, epoch = _torch_shards(uri, size, batch)
    elif name == "torch-objects":
        setup, images, epoch = _torch_objects(objects, size, batch)
    elif name == "tf-shards":
        setup, images, epoch = _tf_shards(uri, size, batch, cycle_length)
    elif name == "tf-objects":
        setup, images, epoch = _tf_objects(objects, size, batch)
    elif name == "records-shards":
        setup, images, epoch = _records_shards(uri)
    else:
        raise ValueError(name)
    import resource

    peak_kb = max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return {"setup_s": setup, "images": images, "epoch_s": epoch, "peak_rss_mb": peak_kb / 1024}


# ------------------------------------------------------------------------------------------------ measuring

@dataclass
class Run:
    contender: str
    round: int
    images: int
    setup_s: float
    epoch_s: float
    requests: int
    megabytes: float
    tunnels: int
    reader_cpu_s: float
    servers_cpu_s: float
    peak_rss_mb: float  # the largest reader process's (the parent's, or one DataLoader worker's)

    @property
    def rate(self) -> float:
        return self.images / self.epoch_s

    def line(self) -> str:
        return (f"round {self.round} {self.contender:<13} {self.images} images in {self.epoch_s:6.1f} s: "
                f"{self.rate:6.1f} images/s; setup {self.setup_s:5.2f} s; {self.requests} requests "
                f"({self.requests / self.images:.3f} an image), {self.megabytes:.0f} MB, {self.tunnels} TLS tunnels; "
                f"CPU s: reader {self.reader_cpu_s:.1f}, emulator + proxy {self.servers_cpu_s:.1f}; "
                f"peak RSS {self.peak_rss_mb:.0f} MB")


def _child_env(name: str, store: Servers, tf_env: list[str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k.upper() not in ("GOOGLE_APPLICATION_CREDENTIALS", "HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY")}
    env.update(STORAGE_EMULATOR_HOST=store.proxy, NO_GCE_CHECK="true", NO_PROXY="127.0.0.1,localhost",
               no_proxy="127.0.0.1,localhost", TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])))
    if name.startswith("tf-"):  # TensorFlow's GCS file system: through the proxy's TLS tunnel (see the module)
        env.update(https_proxy=store.proxy, CURL_CA_BUNDLE=str(store.ca))
        env.update(item.split("=", 1) for item in tf_env)
    return env


def measure(name: str, round_number: int, store: Servers, objects_file: Path, floor_bytes: int, args,
            logs: Path) -> Run:
    """One contender's epoch in a fresh process, with the proxy's counts and the CPU seconds around it; raises
    when fewer bytes than `floor_bytes` (the train images') went through the proxy."""
    import resource

    log = logs / f"{name}-round{round_number}.log"
    before_stats, before_cpu = store.proxy_stats(), store.cpu_seconds()
    before_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    with log.open("w") as err:
        process = subprocess.Popen(
            [sys.executable, __file__, "_run", name, "--objects_file", str(objects_file), "--image_size",
             str(args.image_size), "--batch", str(args.batch),
             *(["--cycle_length", str(args.cycle_length)] if args.cycle_length else [])],
            stdout=subprocess.PIPE, stderr=err, text=True, env=_child_env(name, store, args.tf_env), cwd=ROOT,
            start_new_session=True)
        try:
            stdout, _ = process.communicate(timeout=RUN_DEADLINE_S)
        except subprocess.TimeoutExpired:
            _stop(process)
            raise RuntimeError(f"{name} ran past {RUN_DEADLINE_S} s; its log: {log}") from None
        finally:
            _stop(process)
    if process.returncode != 0:
        raise RuntimeError(f"{name} failed (exit {process.returncode}); its log: {log}\n"
                           + log.read_text()[-3000:])
    after_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    after_stats, after_cpu = store.proxy_stats(), store.cpu_seconds()
    result = json.loads(stdout.strip().splitlines()[-1])
    run = Run(name, round_number, result["images"], result["setup_s"], result["epoch_s"],
               after_stats["requests"] - before_stats["requests"],
               (after_stats["bytes"] - before_stats["bytes"]) / 1e6, after_stats["tunnels"] - before_stats["tunnels"],
               (after_children.ru_utime + after_children.ru_stime)
               - (before_children.ru_utime + before_children.ru_stime),
               sum(after_cpu.values()) - sum(before_cpu.values()), result["peak_rss_mb"])
    if after_stats["errors"] != before_stats["errors"]:
        raise RuntimeError(f"{name}: the emulator failed {after_stats['errors'] - before_stats['errors']} requests")
    if run.megabytes * 1e6 < floor_bytes:
        raise RuntimeError(f"{name} read {run.megabytes:.0f} MB through the proxy, less than the "
                           f"{floor_bytes / 1e6:.0f} MB of train images: some reads went around it")
    return run


def _machine() -> str:
    import platform

    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    return (f"{len(os.sched_getaffinity(0))} cores ({model}), load average "
            + " ".join(f"{x:.2f}" for x in os.getloadavg()))


def table(runs: list[Run], latency_ms: float) -> str:
    """The markdown table of medians, and each reader's rate over its separate-objects counterpart."""
    names = [n for n in CONTENDERS if any(r.contender == n for r in runs)]

    def median(name: str, field: str) -> float:
        return statistics.median(getattr(r, field) for r in runs if r.contender == name)

    lines = [f"| contender ({latency_ms:g} ms a request) | runs | images/s (median) | epoch s | setup s | "
             "requests an image | MB read | reader CPU s | emulator + proxy CPU s | peak RSS MB |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name in names:
        count = sum(1 for r in runs if r.contender == name)
        per_image = statistics.median(r.requests / r.images for r in runs if r.contender == name)
        lines.append(f"| `{name}` | {count} | {median(name, 'rate'):.1f} | {median(name, 'epoch_s'):.1f} | "
                     f"{median(name, 'setup_s'):.2f} | {per_image:.3f} | {median(name, 'megabytes'):.0f} | "
                     f"{median(name, 'reader_cpu_s'):.1f} | {median(name, 'servers_cpu_s'):.1f} | "
                     f"{median(name, 'peak_rss_mb'):.0f} |")
    verdicts = []
    for shards, objects in PAIRS:
        if shards in names and objects in names:
            ratio = median(shards, "rate") / median(objects, "rate")
            verdicts.append(f"- `{shards}` / `{objects}`: {ratio:.2f}x (target 5x: {'PASS' if ratio >= 5 else 'FAIL'})")
    return "\n".join(lines + [""] + verdicts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=2000, help="corpus size (photos; 90%% are train)")
    parser.add_argument("--latency_ms", type=float, default=30, help="the proxy's delay on every request")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--image_size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--target_shard_mb", type=int, default=16)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/shardsmith-bench"))
    parser.add_argument("--only", default=",".join(DEFAULT_CONTENDERS),
                        help=f"a comma-separated subset of {', '.join(CONTENDERS)}")
    parser.add_argument("--cycle_length", type=int, default=None, help="tf-shards: load()'s cycle_length")
    parser.add_argument("--tf_env", action="append", default=[], metavar="NAME=VALUE",
                        help="an environment variable for the TensorFlow contenders (GCS_READ_CACHE_BLOCK_SIZE_MB=8)")
    parser.add_argument("--json", type=Path, default=None, help="write every run here")
    parser.add_argument("--proxy_log", type=Path, default=None, help="the proxy writes a line a request here")
    args = parser.parse_args(argv)
    names = [n for n in args.only.split(",") if n]
    unknown = set(names) - set(CONTENDERS)
    if unknown:
        parser.error(f"unknown contenders {sorted(unknown)}; choose from {', '.join(CONTENDERS)}")

    from corpora import make_corpus

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that the servers and the run under way are stopped
    args.workdir.mkdir(parents=True, exist_ok=True)
    corpus = make_corpus(args.workdir, args.images, kind="photos")
    out = build_dataset(corpus, args.workdir, args.target_shard_mb)
    objects = train_objects(corpus, out)
    logs = args.workdir / "object-store-logs"
    logs.mkdir(exist_ok=True)
    objects_file = logs / "objects.json"
    objects_file.write_text(json.dumps(objects))
    floor = sum((Path(corpus.root) / name.removeprefix("images/")).stat().st_size for name, _ in objects)
    print(f"machine: {_machine()}")
    runs: list[Run] = []
    with servers(args.latency_ms, args.proxy_log) as store:
        started = time.monotonic()
        count, size = upload(store.proxy, out, corpus, objects)
        print(f"store: {count} objects, {size / 1e6:.0f} MB uploaded in {time.monotonic() - started:.0f} s; "
              f"{len(objects)} train images; proxy {store.proxy} holds each request {args.latency_ms:g} ms")
        for round_number in range(1, args.rounds + 1):
            turn = (round_number - 1) % len(names)
            order = names[turn:] + names[:turn]
            for name in reversed(order) if round_number % 2 == 0 else order:
                runs.append(measure(name, round_number, store, objects_file, floor, args, logs))
                print(runs[-1].line(), flush=True)
    print(f"machine after: {_machine()}")
    print()
    print(table(runs, args.latency_ms))
    if args.json:
        args.json.write_text(json.dumps([{**r.__dict__, "rate": r.rate} for r in runs], indent=1))
    return 0


def _child_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    if argv[0] == "_proxy":
        for flag in ("--upstream_port", "--latency_ms", "--cert", "--key", "--port_file"):
            parser.add_argument(flag, required=True)
        parser.add_argument("--log", type=Path, default=None)
        args = parser.parse_args(argv[1:])
        serve_proxy(int(args.upstream_port), float(args.latency_ms), Path(args.cert), Path(args.key),
                    Path(args.port_file), args.log)
        return 0
    parent = os.getppid()

    def watch_parent() -> None:  # a run whose benchmark is gone stops (its DataLoader workers follow it)
        while os.getppid() == parent:
            time.sleep(1)
        os._exit(1)

    threading.Thread(target=watch_parent, daemon=True).start()
    parser.add_argument("contender", choices=CONTENDERS)
    parser.add_argument("--objects_file", type=Path, required=True)
    parser.add_argument("--image_size", type=int, required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--cycle_length", type=int, default=None)
    args = parser.parse_args(argv[1:])
    print(json.dumps(run_contender(args.contender, args.objects_file, args.image_size, args.batch,
                                   args.cycle_length)))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("_proxy", "_run"):
        raise SystemExit(_child_main(sys.argv[1:]))
    raise SystemExit(main())
