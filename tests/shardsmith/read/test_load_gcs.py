"""`load()` on gs:// against the real local Cloud Storage server (gcp-storage-emulator), through TensorFlow's own
GCS file system: each shard's first block is fetched once per epoch (by the interleave), and a shard copied in from
another build of the same size is refused before anything is read, naming the file.

TensorFlow's GCS file system (C++, libcurl) has its endpoints compiled in (https://www.googleapis.com and
https://storage.googleapis.com). It reaches the emulator here through libcurl's standard `https_proxy`: the proxy
below answers `CONNECT` with TLS itself, with a certificate for those two names from a certificate authority made
for the test (libcurl trusts it through CURL_CA_BUNDLE), and forwards each request inside the tunnel to the
emulator, writing down its host, path and Range header. The Python clients (Beam's, google-cloud-storage) reach
the same proxy as STORAGE_EMULATOR_HOST, in plain HTTP. Nothing is resolved and nothing leaves 127.0.0.1; every
byte `load()` reads comes from the emulator, and every request to it is counted.
"""

from __future__ import annotations

import datetime
import http.client
import json
import os
import socketserver
import ssl
import subprocess
import sys
import threading
import urllib.parse
from pathlib import Path

import pytest

pytest.importorskip("gcp_storage_emulator", reason="gcp-storage-emulator is not installed")

ROOT = Path(__file__).resolve().parents[3]
TLS_HOSTS = ("www.googleapis.com", "storage.googleapis.com")
MEDIA_HOST = "storage.googleapis.com"  # where TensorFlow's GCS file system reads an object's bytes


def _certificates(folder: Path) -> tuple[Path, Path, Path]:
    """(CA certificate, server certificate, server key), PEM: a certificate authority that exists only in
    `folder` and a certificate it signs for TLS_HOSTS."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "shardsmith test CA (local only)")])
    valid = {"not_valid_before": now - datetime.timedelta(hours=1), "not_valid_after": now + datetime.timedelta(1)}
    ca = (x509.CertificateBuilder(subject_name=ca_name, issuer_name=ca_name, public_key=ca_key.public_key(),
                                  serial_number=x509.random_serial_number(), **valid)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .sign(ca_key, hashes.SHA256()))
    leaf = (x509.CertificateBuilder(subject_name=x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, TLS_HOSTS[0])]),
                                    issuer_name=ca_name, public_key=key.public_key(),
                                    serial_number=x509.random_serial_number(), **valid)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(host) for host in TLS_HOSTS]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths


class _Proxy(socketserver.ThreadingTCPServer):
    """Forwards every request to the emulator and keeps (host, method, path, Range) of each."""

    daemon_threads = True

    def __init__(self, emulator: str, tls: ssl.SSLContext):
        super().__init__(("127.0.0.1", 0), _Tunnel)
        self.emulator, self.tls = urllib.parse.urlsplit(emulator), tls
        self.requests: list[tuple[str, str, str, str | None]] = []
        self.lock = threading.Lock()


class _Tunnel(socketserver.StreamRequestHandler):
    server: _Proxy

    def handle(self) -> None:
        tunnel_to = self._serve(self.rfile, self.wfile, None)
        if tunnel_to:  # CONNECT host:443 answered: TLS inside, requests forwarded as before
            try:
                tls = self.server.tls.wrap_socket(self.connection, server_side=True)
                self._serve(tls.makefile("rb"), tls.makefile("wb"), tunnel_to)
            except (OSError, ssl.SSLError):
                pass  # the client hung up

    def _serve(self, rfile, wfile, host: str | None) -> str | None:
        """Forwards requests until the client closes; returns the host a CONNECT asks for."""
        while line := rfile.readline():
            method, target, _ = line.decode("latin-1").split(" ", 2)
            headers = {}
            while (header := rfile.readline().decode("latin-1").strip()):
                name, value = header.split(":", 1)
                headers[name.strip().lower()] = value.strip()
            if method == "CONNECT":
                wfile.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                wfile.flush()
                return target.split(":")[0]
            body = rfile.read(int(headers["content-length"])) if "content-length" in headers else None
            url = urllib.parse.urlsplit(target)
            path = url.path + (f"?{url.query}" if url.query else "")
            with self.server.lock:
                self.server.requests.append((host or "emulator", method, path, headers.get("range")))
            upstream = http.client.HTTPConnection(self.server.emulator.hostname, self.server.emulator.port,
                                                  timeout=60)
            sent = {k: v for k, v in headers.items() if k not in ("host", "connection", "proxy-connection")}
            upstream.request(method, path, body=body, headers=sent)
            answer = upstream.getresponse()
            data = answer.read()
            upstream.close()
            kept = [f"{k}: {v}\r\n" for k, v in answer.getheaders()
                    if k.lower() not in ("transfer-encoding", "connection", "content-length")]
            wfile.write(f"HTTP/1.1 {answer.status} {answer.reason}\r\n{''.join(kept)}"
                        f"Content-Length: {len(data)}\r\n\r\n".encode("latin-1") + data)
            wfile.flush()
        return None


@pytest.fixture(scope="module")
def store(emulator, beam_on_emulator, tmp_path_factory):
    """(bucket, proxy, environment for a child process whose TensorFlow and Python clients reach the emulator only
    through the proxy)."""
    ca, cert, key = _certificates(tmp_path_factory.mktemp("tls"))
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    proxy = _Proxy(emulator, tls)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    address = f"http://127.0.0.1:{proxy.server_address[1]}"
    try:
        with beam_on_emulator(address) as (client, _):
            client.create_bucket("ss-load-gcs")
            env = {k: v for k, v in os.environ.items()
                   if k.upper() not in ("GOOGLE_APPLICATION_CREDENTIALS", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY")}
            env.update(https_proxy=address, CURL_CA_BUNDLE=str(ca), TF_CPP_MIN_LOG_LEVEL="3",
                       PYTHONPATH=os.pathsep.join(filter(None, [env.get("PYTHONPATH"), str(ROOT)])))
            yield client.bucket("ss-load-gcs"), proxy, env
    finally:
        proxy.shutdown()
        proxy.server_close()


def _upload(bucket, out: Path, prefix: str) -> str:
    """The dataset's folder, as the build wrote it, under gs://<bucket>/<prefix>/; returns that URI."""
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        bucket.blob(f"{prefix}/{path.relative_to(out).as_posix()}").upload_from_filename(str(path))
    return f"gs://{bucket.name}/{prefix}"


READ_EPOCH = """
import json, sys
import shardsmith
from shardsmith.read.load import DatasetChanged
try:
    dataset = shardsmith.load(sys.argv[1], "train", batch_size=None)
except DatasetChanged as e:
    print(json.dumps({"refused": str(e)}))
else:
    print(json.dumps({"records": sum(1 for _ in dataset)}))
"""


def _read_epoch(env: dict, uri: str) -> dict:
    done = subprocess.run([sys.executable, "-c", READ_EPOCH, uri], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _media_reads(proxy: _Proxy, bucket: str, name: str) -> list[str | None]:
    """The Range headers of the requests for the object's bytes (not its metadata) that came through the proxy."""
    path = f"/{bucket}/{urllib.parse.quote(name, safe='')}"
    alt = f"/o/{urllib.parse.quote(name, safe='')}?alt=media"
    return [byte_range for host, method, target, byte_range in proxy.requests
            if method == "GET" and ((host == MEDIA_HOST and target.split("?")[0] in (path, path.replace("%2F", "/")))
                                    or alt in target)]


def _starts_at_zero(byte_range: str | None) -> bool:
    return byte_range is None or byte_range.startswith("bytes=0-")


def test_load_on_gcs_reads_each_shards_first_block_once(store, two_builds, metadata_of):
    bucket, proxy, env = store
    uri = _upload(bucket, two_builds[0], "once")
    metadata = metadata_of(two_builds[0])
    shards = metadata["splits"]["train"]["shards"]
    proxy.requests.clear()

    assert _read_epoch(env, uri) == {"records": metadata["splits"]["train"]["num_examples"]}
    for shard in shards:
        reads = _media_reads(proxy, bucket.name, f"once/{metadata['build_dir']}/{shard['file']}")
        assert [r for r in reads if _starts_at_zero(r)] == [reads[0]] and reads, (shard["file"], proxy.requests)


def test_load_on_gcs_refuses_a_shard_copied_in_from_another_build_before_reading_any(store, two_builds,
                                                                                      metadata_of):
    bucket, proxy, env = store
    one, two = two_builds
    uri = _upload(bucket, one, "swapped")
    build_dir, shard = metadata_of(one)["build_dir"], metadata_of(one)["splits"]["train"]["shards"][1]
    theirs = two / metadata_of(two)["build_dir"] / shard["file"]
    assert theirs.stat().st_size == shard["num_bytes"], "the size check alone cannot tell"
    bucket.blob(f"swapped/{build_dir}/{shard['file']}").upload_from_filename(str(theirs))
    proxy.requests.clear()

    refused = _read_epoch(env, uri)["refused"]
    assert refused.startswith(f"{uri}/{build_dir}/{shard['file']}: ") and "not the file this build wrote" in refused
    for other in metadata_of(one)["splits"]["train"]["shards"]:
        assert _media_reads(proxy, bucket.name, f"swapped/{build_dir}/{other['file']}") == [], proxy.requests
