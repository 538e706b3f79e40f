"""Fixtures the tests of more than one part share: real image files, real builds through the CLI (on Beam's
FnApiRunner, pinned by pipeline.running.runner for every local run), shards read back with tf.data, a local
Cloud Storage server and a local S3 server (moto). A fixture that only the tests under one folder use lives in
that folder's conftest.py (tests/shardsmith/conftest.py: the readers').

pytest runs with --import-mode=importlib and apache-beam installs a top-level package named `tests`, so
helpers live here as fixtures rather than in an importable module.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import random
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
from PIL import Image, ImageDraw

from pipeline import cli
from shardsmith.format.metadata_schema import Metadata
from shardsmith.output_folder.layout import own_copy

TFRECORDER_DATA = Path(__file__).parent / "data" / "tfrecorder"
# A sitecustomize.py that gives the processes a build starts (its shard writers) _beam_on_emulator's settings.
EMULATOR_SITE = Path(__file__).parent / "emulator_site"


# The files whose tests take longest (10 to 55 s each on a 2-core machine, from `--durations=0` of a whole run alone),
# longest first; test_airflow_dags.py runs only where .ci/run made its virtualenv.
# `bash launch.sh test` runs files on two or more workers (--dist loadfile): each worker takes the next file as it
# finishes one, so the suite ends soonest when the long files go first and the short ones fill in at the end.
LONG_FILES = ("test_readme.py", "test_differential_more.py", "test_hostile_input.py", "test_differential.py",
              "test_gcs_end_to_end.py", "test_incremental.py", "test_quiet.py", "test_chaos.py",
              "test_hostile_versions.py", "test_card.py", "test_transform_fn.py", "test_load_decode.py",
              "test_features.py", "test_split_shard.py", "test_compaction_gcs.py", "test_kill_and_retry.py",
              "test_versions_s3.py", "test_near_duplicate_bounds.py", "test_tags.py", "test_torch_resume.py",
              "test_load_gcs.py", "test_compaction.py", "test_command_progress.py", "test_build_folder_cleanup.py",
              "test_incremental_gcs.py", "test_readers_s3.py", "test_near_duplicate_nights.py", "test_load_resume.py",
              "test_reduced_decode.py", "test_tags_gcs.py", "test_airflow_dags.py")


def pytest_configure(config):
    # xdist otherwise hands out the files with the most tests first, which leaves a long file of few tests
    # (test_chaos.py: one) to the end, one worker running it while the other waits.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(items):
    """LONG_FILES first, longest first; the rest in their usual order (sort is stable)."""
    rank = {name: i for i, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def _image(label_index: int, rng: random.Random) -> Image.Image:
    width, height = rng.randrange(48, 129, 4), rng.randrange(40, 113, 4)
    image = Image.new("RGB", (width, height), tuple(rng.randrange(256) for _ in range(3)))
    draw = ImageDraw.Draw(image)
    for _ in range(12):
        x, y = rng.randrange(width), rng.randrange(height)
        draw.rectangle((x, y, x + 6, y + 6), fill=tuple(rng.randrange(256) for _ in range(3)))
    draw.text((2, 2), str(label_index), fill=(255, 255, 255))
    return image


def write_image(path: Path, image: Image.Image, kind: str) -> None:
    """kind: jpeg (RGB), gray-jpeg, png (RGB), gray-png, rgba-png."""
    out = io.BytesIO()
    if kind == "jpeg":
        image.save(out, "JPEG", quality=85)
    elif kind == "gray-jpeg":
        image.convert("L").save(out, "JPEG", quality=85)
    elif kind == "png":
        image.save(out, "PNG")
    elif kind == "gray-png":
        image.convert("L").save(out, "PNG")
    elif kind == "rgba-png":
        rgba = image.convert("RGBA")
        rgba.putalpha(180)
        rgba.save(out, "PNG")
    else:
        raise ValueError(kind)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(out.getvalue())


KINDS = ("jpeg", "jpeg", "gray-jpeg", "png", "gray-png", "rgba-png")
EXTENSIONS = {"jpeg": "jpg", "gray-jpeg": "jpg", "png": "png", "gray-png": "png", "rgba-png": "png"}


@dataclass(frozen=True)
class ImageSet:
    """Real image files and a label-sorted manifest of them (the order that defeats naive converters)."""

    root: Path
    manifest: Path
    rows: list[tuple[str, str, str]]  # (split, relative uri, label), in manifest order

    def path_of(self, uri: str) -> Path:
        return self.root / uri


def make_image_set(root: Path, counts: dict[str, dict[str, int]], seed: int = 0) -> ImageSet:
    """counts: label -> split -> number of images. Writes images under root/img/<label>/ and root/manifest.csv,
    sorted by label then split, with a header row."""
    rng = random.Random(seed)
    rows = []
    for label_index, label in enumerate(sorted(counts)):
        for split, n in counts[label].items():
            for i in range(n):
                kind = KINDS[(i + label_index) % len(KINDS)]
                uri = f"img/{label}/{split}_{i:04d}.{EXTENSIONS[kind]}"
                write_image(root / uri, _image(label_index, rng), kind)
                rows.append((split, uri, label))
    return ImageSet(root, write_manifest(root / "manifest.csv", rows), rows)


def write_manifest(path: Path, rows: list[tuple[str, str, str]]) -> Path:
    """A CSV manifest (header split,image_uri,label) of `rows` at `path`; returns `path`."""
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["split", "image_uri", "label"])
        writer.writerows(rows)
    return path


@pytest.fixture(scope="session")
def label_sorted_set(tmp_path_factory) -> ImageSet:
    """Three labels of uneven size in all three splits; 285 real JPEG and PNG files."""
    counts = {
        "cat": {"train": 90, "validation": 12, "test": 11},
        "dog": {"train": 60, "validation": 8, "test": 8},
        "emu": {"train": 75, "validation": 11, "test": 10},
    }
    return make_image_set(tmp_path_factory.mktemp("label_sorted"), counts)


@dataclass
class Result:
    code: int
    out: str
    err: str


@pytest.fixture
def shardsmith(capsys):
    """Runs the CLI in this process (`shardsmith ARGS...`) and returns its exit code and output."""

    def run(*args: str) -> Result:
        code = cli.main([str(a) for a in args])
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


@pytest.fixture
def csv_manifest(tmp_path):
    """csv_manifest(name, rows): a CSV manifest (header split,image_uri,label) of `rows` at tmp_path/NAME.csv."""
    return lambda name, rows: write_manifest(tmp_path / f"{name}.csv", rows)


@pytest.fixture
def version_rows(label_sorted_set):
    """version_rows(train_per_label=24): rows of the label-sorted set with absolute URIs, in URI order, for the
    tests of versions: `train_per_label` training rows, 3 validation and 3 test rows of each of the three labels."""

    def pick(train_per_label: int = 24) -> list[tuple[str, str, str]]:
        by_label: dict[str, list] = {}
        for split, uri, label in label_sorted_set.rows:
            by_label.setdefault(label, []).append((split, str(label_sorted_set.path_of(uri)), label))
        picked = []
        for label_rows in by_label.values():
            for split, wanted in (("train", train_per_label), ("validation", 3), ("test", 3)):
                picked += [r for r in label_rows if r[0] == split][:wanted]
        return sorted(picked, key=lambda r: r[1])

    return pick


@pytest.fixture
def rows(version_rows) -> list[tuple[str, str, str]]:
    """90 rows (30 per label, all three splits) with absolute URIs, in URI order."""
    return version_rows()


NUM_SHARDS = "train=4,validation=2,test=2"


@pytest.fixture(scope="session")
def built(label_sorted_set, tmp_path_factory) -> Path:
    """The label-sorted set built once, in_memory mode, with fixed shard counts."""
    out = tmp_path_factory.mktemp("built") / "out"
    code = cli.main(["build", "--manifest", str(label_sorted_set.manifest), "--output_dir", str(out),
                     "--name", "pets", "--num_shards", NUM_SHARDS])
    assert code == 0
    return out


def read_metadata(out: Path) -> dict:
    return json.loads((out / "metadata.json").read_text())


def files_dir(out: Path) -> Path:
    """The folder of the build that `out`'s metadata.json publishes (builds/<id>), where its files are."""
    return out / read_metadata(out).get("build_dir", ".")


def read_split(out: Path, split: str) -> list[list[dict]]:
    """Every record of a split, shard by shard in file order, parsed by tf.io.parse_single_example with the
    feature spec from metadata.json."""
    import tensorflow as tf

    metadata = read_metadata(out)
    dtypes = {"bytes": tf.string, "int64": tf.int64, "float": tf.float32}
    spec = {key: tf.io.VarLenFeature(dtypes[kind[:-5]]) if kind.endswith("_list")
            else tf.io.FixedLenFeature([], dtypes[kind]) for key, kind in metadata["features"].items()}
    binary = {"image/encoded", "image/segmentation/class/encoded"}

    def value(key, tensor):
        if isinstance(tensor, tf.SparseTensor):
            return [v.decode() if isinstance(v, bytes) else v for v in tensor.values.numpy().tolist()]
        return tensor.numpy().decode() if key not in binary and tensor.dtype == tf.string else tensor.numpy()

    compression = "GZIP" if metadata["compression"] == "gzip" else ""
    shards = []
    for shard in metadata["splits"][split]["shards"]:
        dataset = tf.data.TFRecordDataset(str(files_dir(out) / shard["file"]), compression_type=compression)
        records = []
        for serialized in dataset:
            parsed = tf.io.parse_single_example(serialized, spec)
            records.append({k: value(k, v) for k, v in parsed.items()})
        shards.append(records)
    return shards


@pytest.fixture
def read_records():
    return read_split


@pytest.fixture
def metadata_of():
    return read_metadata


@pytest.fixture
def files_of_build():
    """files_dir(out): the published build's folder."""
    return files_dir


@pytest.fixture(scope="session")
def side_venv():
    """side_venv(env_var, folder, command): the Python of a virtualenv beside .venv (`env_var`'s folder, else the
    checkout's `folder`), made by `bash launch.sh command`; the test skips, saying so, where there is none."""

    def python(env_var: str, folder: str, command: str) -> Path:
        venv = Path(os.environ.get(env_var) or Path(__file__).resolve().parents[1] / folder)
        found = venv / "bin" / "python"
        if not os.access(found, os.X_OK):
            pytest.skip(f"no virtualenv at {venv} (make one with: bash launch.sh {command})")
        return found

    return python


@pytest.fixture(scope="session")
def tfrecorder_data() -> Path:
    return TFRECORDER_DATA


def write_metadata(out: Path, metadata: dict) -> None:
    """Writes an edited top-level metadata.json and, for a published build, the build's own copy to match."""
    (out / "metadata.json").write_text(json.dumps(metadata, indent=2))
    typed = Metadata.from_json(metadata)
    if typed.is_published:
        (files_dir(out) / "metadata.json").write_text(json.dumps(own_copy(typed).to_json(), indent=2))


@pytest.fixture
def metadata_writer():
    return write_metadata


@pytest.fixture(scope="session")
def tf():
    """TensorFlow itself, imported on first use (seconds), for tests that check against its decoders."""
    import tensorflow

    return tensorflow


@pytest.fixture(autouse=True)
def _quiet_tensorflow():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    yield


@pytest.fixture(scope="session")
def image_set_factory():
    """make_image_set(root, counts, seed) -> ImageSet."""
    return make_image_set


@pytest.fixture
def image_writer():
    """write_image(path, pil_image, kind) for tests that need one odd file."""
    return write_image


def assert_balanced(shards: list[list[str]], what: str = "") -> None:
    """Shard sizes differ by at most one, and each label's count per shard is the floor or ceiling of its
    share: `shards` holds, per shard, the label each record was placed by."""
    sizes = [len(shard) for shard in shards]
    assert max(sizes) - min(sizes) <= 1, (what, sizes)
    total = Counter(label for shard in shards for label in shard)
    for shard in shards:
        counts = Counter(shard)
        for label, n in total.items():
            assert counts[label] in (n // len(shards), -(-n // len(shards))), (what, label, counts, total)


def shard_bytes(out: Path) -> dict[str, bytes]:
    """Every shard file of a dataset's published build and its index file (<shard>.idx), by name."""
    return {p.name: p.read_bytes() for p in sorted(files_dir(out).glob("*.tfrecord-*"))}


def placed_by(label_ids: list[int], metadata: dict) -> str:
    """The label a record with several labels was placed by: the rarest in the training images (lower id on ties)."""
    counts = metadata["label_image_counts"]
    return metadata["labels"][min(label_ids, key=lambda i: (counts[i], i))]


@pytest.fixture
def checks():
    """Checks shared by the tests of each task: balance, byte-identical reruns, the placing label."""
    return SimpleNamespace(assert_balanced=assert_balanced, shard_bytes=shard_bytes, placed_by=placed_by)


def stop_process(process: subprocess.Popen, timeout_s: float) -> None:
    """Terminates a helper process a test started (a server, a worker pool); kills it if it lingers."""
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture(scope="session")
def stopped():
    """stop_process(process, timeout_s), for module fixtures that start servers."""
    return stop_process


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def emulator(stopped):
    """A gcp-storage-emulator process (a real local Cloud Storage server, JSON API) on a free port, in memory;
    stopped at the end of the module. Skips the test when gcp-storage-emulator is not installed."""
    pytest.importorskip("gcp_storage_emulator", reason="gcp-storage-emulator is not installed")
    port = _free_port()
    host = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [sys.executable, "-m", "gcp_storage_emulator", "start", "--host", "127.0.0.1", "--port", str(port),
         "--in-memory", "--quiet"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(host + "/", timeout=1) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None:
                pytest.fail(f"gcp-storage-emulator exited: {process.stderr.read().decode()[-2000:]}")
            if time.monotonic() > deadline:
                pytest.fail("gcp-storage-emulator did not answer within 30 s")
            time.sleep(0.1)
        yield host
    finally:
        stopped(process, 10)


@contextlib.contextmanager
def _beam_on_emulator(host: str):
    """Points Beam's GCS client (and google-cloud-storage) at the emulator at `host`, anonymously, until the block
    ends. Beam's client honours STORAGE_EMULATOR_HOST only with anonymous credentials, and retries the credential
    lookup for about 22 s first: its cache is settled as "none found" up front; NO_GCE_CHECK keeps google-auth from
    probing a metadata server. Processes started inside the block settle it the same way at start-up
    (emulator_site/sitecustomize.py, on their PYTHONPATH). Yields (an anonymous storage client, the MonkeyPatch,
    for more patches)."""
    from apache_beam.internal.gcp import auth
    from google.cloud import storage

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STORAGE_EMULATOR_HOST", host)
        patch.setenv("NO_GCE_CHECK", "true")
        patch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(EMULATOR_SITE), os.environ.get("PYTHONPATH")])))
        patch.setattr(auth._Credentials, "_credentials_init", True)
        patch.setattr(auth._Credentials, "_credentials", None)
        yield storage.Client.create_anonymous_client(), patch


@pytest.fixture(scope="session")
def beam_on_emulator():
    """_beam_on_emulator(host): a context manager pointing Beam's GCS client at a gcp-storage-emulator."""
    return _beam_on_emulator


@dataclass
class GcsBucket:
    """A bucket on the emulator (Beam pointed at it), with the helpers the gs:// tests share."""

    client: object
    name: str

    def upload_manifest(self, name: str, rows: list[tuple[str, str, str]]) -> str:
        """A CSV manifest (split,image_uri,label) uploaded as in/NAME; returns its gs:// URI."""
        text = io.StringIO()
        writer = csv.writer(text, lineterminator="\n")
        writer.writerow(["split", "image_uri", "label"])
        writer.writerows(rows)
        self.client.bucket(self.name).blob(f"in/{name}").upload_from_string(text.getvalue())
        return f"gs://{self.name}/in/{name}"

    def upload_images(self, count: int, seed: int) -> list[tuple[str, str, str]]:
        """`count` small real JPEGs as in/images/NNN.jpg, three labels over all three splits; returns their
        manifest rows, with URIs relative to in/."""
        rng = random.Random(seed)
        rows = []
        for i in range(count):
            out = io.BytesIO()
            Image.new("RGB", (32 + i, 24), tuple(rng.randrange(256) for _ in range(3))).save(out, "JPEG", quality=85)
            self.client.bucket(self.name).blob(f"in/images/{i:03d}.jpg").upload_from_string(out.getvalue())
            rows.append((("train", "train", "train", "train", "validation", "test")[i % 6], f"images/{i:03d}.jpg",
                         ("cat", "dog", "emu")[i % 3]))
        return rows

    @staticmethod
    def read(uri: str) -> bytes:
        from apache_beam.io.filesystems import FileSystems

        with FileSystems.open(uri) as f:
            return f.read()


@pytest.fixture(scope="module")
def gcs_bucket(emulator, beam_on_emulator, request) -> GcsBucket:
    """A bucket named for the test module on a gcp-storage-emulator, Beam's GCS client pointed at it."""
    name = "ss-" + request.module.__name__.rsplit(".", 1)[-1].replace("_", "-")[:50]
    with beam_on_emulator(emulator) as (client, _):
        client.create_bucket(name)
        yield GcsBucket(client, name)


@pytest.fixture(scope="module")
def s3_server(stopped, tmp_path_factory):
    """A moto server process (a real local S3-protocol server; moto[server]) on a free port, in memory; stopped at
    the end of the module. Yields its endpoint URL. Skips the test when moto is not installed. Its log (a line a
    request) goes to a file: a pipe nobody reads would stop the server once full."""
    pytest.importorskip("moto.server", reason="moto[server] is not installed")
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("moto") / "server.log"
    with open(log, "wb") as written:
        process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                   stdout=subprocess.DEVNULL, stderr=written)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(endpoint + "/moto-api/", timeout=1) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None:
                pytest.fail(f"moto server exited: {log.read_text(errors='replace')[-2000:]}")
            if time.monotonic() > deadline:
                pytest.fail("moto server did not answer within 30 s")
            time.sleep(0.1)
        yield endpoint
    finally:
        stopped(process, 10)


@dataclass
class S3Bucket:
    """A bucket on the moto server, with the helpers the s3:// tests share (GcsBucket's, for S3)."""

    client: object
    name: str

    def put(self, key: str, data: bytes) -> str:
        self.client.put_object(Bucket=self.name, Key=key, Body=data)
        return f"s3://{self.name}/{key}"

    def upload_manifest(self, name: str, rows: list[tuple[str, str, str]]) -> str:
        """A CSV manifest (split,image_uri,label) uploaded as in/NAME; returns its s3:// URI."""
        text = io.StringIO()
        writer = csv.writer(text, lineterminator="\n")
        writer.writerow(["split", "image_uri", "label"])
        writer.writerows(rows)
        return self.put(f"in/{name}", text.getvalue().encode())

    def upload_images(self, count: int, seed: int) -> list[tuple[str, str, str]]:
        """`count` small real JPEGs as in/images/NNN.jpg, three labels over all three splits; returns their
        manifest rows, with URIs relative to in/."""
        rng = random.Random(seed)
        rows = []
        for i in range(count):
            out = io.BytesIO()
            Image.new("RGB", (32 + i, 24), tuple(rng.randrange(256) for _ in range(3))).save(out, "JPEG", quality=85)
            self.put(f"in/images/{i:03d}.jpg", out.getvalue())
            rows.append((("train", "train", "train", "train", "validation", "test")[i % 6], f"images/{i:03d}.jpg",
                         ("cat", "dog", "emu")[i % 3]))
        return rows

    def read(self, uri: str) -> bytes:
        bucket, key = uri.removeprefix("s3://").split("/", 1)
        return self.client.get_object(Bucket=bucket, Key=key)["Body"].read()

    def keys(self, prefix: str = "") -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.name, Prefix=prefix)
        return [item["Key"] for page in pages for item in page.get("Contents", ())]


@pytest.fixture(scope="module")
def s3_bucket(s3_server, request) -> S3Bucket:
    """A bucket named for the test module on the moto server, with the standard AWS environment (AWS_ENDPOINT_URL,
    test credentials, a region; no shared config files) pointing boto3, in this process and the ones a build
    starts, at it until the module ends."""
    import boto3

    name = "ss-" + request.module.__name__.rsplit(".", 1)[-1].replace("_", "-")[:50].lower()
    with pytest.MonkeyPatch.context() as patch:
        for variable, value in (("AWS_ENDPOINT_URL", s3_server), ("AWS_ACCESS_KEY_ID", "testing"),
                                ("AWS_SECRET_ACCESS_KEY", "testing"), ("AWS_DEFAULT_REGION", "us-east-1"),
                                ("AWS_CONFIG_FILE", os.devnull), ("AWS_SHARED_CREDENTIALS_FILE", os.devnull)):
            patch.setenv(variable, value)
        patch.delenv("AWS_PROFILE", raising=False)
        patch.delenv("AWS_SESSION_TOKEN", raising=False)
        client = boto3.session.Session().client("s3")
        client.create_bucket(Bucket=name)
        yield S3Bucket(client, name)
