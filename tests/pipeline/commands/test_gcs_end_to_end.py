"""gs:// end to end against a real local GCS server: gcp-storage-emulator, started here as a subprocess on
127.0.0.1, speaking the Cloud Storage JSON API. Nothing in the pipeline is mocked: the manifest, the image
reads, the size lookups, the shard writes and renames, errors.jsonl, labels.txt, metadata.json, the preflight
checks and the --overwrite clean-up all go through Beam's GCS client (google-cloud-storage) to the server.
The last test submits the build with the DataflowRunner: staging goes to the emulator and only the Dataflow
REST API itself is a small stand-in on localhost (fake_dataflow_api).

What had to be found out:
- Beam's client honours STORAGE_EMULATOR_HOST, but only with anonymous credentials: with credentials it would
  fetch tokens from Google. Beam falls back to anonymous access after `google.auth.default()` fails, and it
  retries that lookup with backoff first (about 22 s here, even with NO_GCE_CHECK=true). The tests settle
  Beam's credential cache as "none found" (anonymous) up front; NO_GCE_CHECK=true keeps google-auth from
  probing a metadata server.
- TensorFlow's own GCS filesystem (C++, used by tf.io.gfile and tf.data) has its endpoint compiled in
  (https://www.googleapis.com, no emulator setting: "Could not resolve host: www.googleapis.com" here), so
  tf.data cannot read the shards from the emulator: they are read by downloading their bytes through Beam's
  FileSystems and parsing them with tf.data. The build itself never uses it: transform_fn/ is written through
  shardsmith.storage like every other file.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import random
import time
from pathlib import Path

import google_crc32c
import pytest

try:
    import gcp_storage_emulator  # noqa: F401
except ImportError:
    pytest.skip("gcp-storage-emulator is not installed (pip install gcp-storage-emulator)", allow_module_level=True)

from PIL import Image, ImageDraw

from shardsmith.format.naming import TEMP_PREFIX
from shardsmith.read.dataset_checks import verify

BUCKET = "shardsmith-e2e"
LABELS = ("cat", "dog", "emu")


@pytest.fixture(scope="module")
def gcs(emulator, beam_on_emulator):
    """Points Beam's GCS client (and google-cloud-storage) at the emulator, anonymously; restores everything
    afterwards. Yields a storage client."""
    with beam_on_emulator(emulator) as (client, _):
        client.create_bucket(BUCKET)
        yield client


def _image_bytes(kind: str, rng: random.Random) -> bytes:
    image = Image.new("RGB", (rng.randrange(40, 97, 4), rng.randrange(32, 81, 4)),
                      tuple(rng.randrange(256) for _ in range(3)))
    draw = ImageDraw.Draw(image)
    for _ in range(8):
        x, y = rng.randrange(image.width), rng.randrange(image.height)
        draw.rectangle((x, y, x + 5, y + 5), fill=tuple(rng.randrange(256) for _ in range(3)))
    out = io.BytesIO()
    if kind == "png":
        image.convert("L").save(out, "PNG")
    else:
        image.save(out, "JPEG", quality=85)
    return out.getvalue()


@pytest.fixture(scope="module")
def uploaded(gcs):
    """Real JPEG and PNG files and a label-sorted CSV manifest in the bucket: relative URIs (resolved against the
    manifest's gs:// folder), one absolute gs:// URI, a missing file and a truncated JPEG.
    Returns (manifest URI, {gs URI: bytes} of the good images, number of manifest rows)."""
    bucket = gcs.bucket(BUCKET)
    rng = random.Random(7)
    rows, images = [], {}
    counts = {"train": 6, "validation": 2, "test": 2}
    for label in LABELS:
        for split, n in counts.items():
            for i in range(n):
                kind = "png" if i % 3 == 2 else "jpg"
                name = f"in/images/{label}/{split}_{i}.{kind}"
                data = _image_bytes(kind, rng)
                bucket.blob(name).upload_from_string(data)
                images[f"gs://{BUCKET}/{name}"] = data
                relative = name.removeprefix("in/")
                rows.append((split, relative if i else f"gs://{BUCKET}/{name}", label))
    truncated = _image_bytes("jpg", rng)
    bucket.blob("in/images/cat/truncated.jpg").upload_from_string(truncated[: len(truncated) // 2])
    rows += [("train", "images/cat/missing.jpg", "cat"), ("train", "images/cat/truncated.jpg", "cat")]
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(["split", "image_uri", "label"])
    writer.writerows(rows)
    bucket.blob("in/manifest.csv").upload_from_string(text.getvalue())
    return f"gs://{BUCKET}/in/manifest.csv", images, len(rows)


def _read(uri: str) -> bytes:
    from apache_beam.io.filesystems import FileSystems

    with FileSystems.open(uri) as f:
        return f.read()


def _download_tree(prefix: str, destination: Path) -> None:
    from apache_beam.io.filesystems import FileSystems

    for metadata in FileSystems.match([prefix.rstrip("/") + "/**"])[0].metadata_list:
        target = destination / metadata.path[len(prefix.rstrip("/")) + 1:]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(_read(metadata.path))


BUILD_ARGS = ("--name", "pets", "--num_shards", "train=2,validation=1,test=1", "--max_error_fraction", "0.2")


@pytest.fixture(scope="module")
def built_on_gcs(uploaded, gcs, tmp_path_factory):
    from pipeline import cli

    manifest, _, _ = uploaded
    started = time.monotonic()
    code = cli.main(["build", "--manifest", manifest, "--output_dir", f"gs://{BUCKET}/out", *BUILD_ARGS])
    assert code == 0
    return f"gs://{BUCKET}/out", time.monotonic() - started


def test_build_reads_and_writes_gs_paths_on_a_real_gcs_server(built_on_gcs, uploaded, gcs, tmp_path):
    import tensorflow as tf
    import tensorflow_transform as tft

    out, _ = built_on_gcs
    _, images, num_rows = uploaded
    names = sorted(blob.name for blob in gcs.list_blobs(BUCKET, prefix="out/"))
    metadata = json.loads(_read(f"{out}/metadata.json"))
    files = f"{out}/{metadata['build_dir']}"  # the published build's folder
    in_files = files[len(f"gs://{BUCKET}/"):]

    # Accounting: every manifest row is a record or a line of errors.jsonl, and both live in the bucket.
    errors = [json.loads(line) for line in _read(f"{files}/errors.jsonl").decode().splitlines()]
    assert metadata["num_input_rows"] == num_rows
    assert metadata["num_examples"] + len(errors) == num_rows == len(images) + 2
    assert metadata["num_errors"] == len(errors) == 2
    by_uri = {e["uri"]: e for e in errors}
    assert by_uri["images/cat/missing.jpg"]["reason"] == "file not found"
    assert by_uri["images/cat/truncated.jpg"]["stage"] == "load"
    assert all(e["source"] == f"gs://{BUCKET}/in/manifest.csv" for e in errors)
    assert _read(f"{files}/labels.txt").decode().splitlines() == list(LABELS)

    # Every shard named in metadata.json is an object in the bucket, and nothing else is left behind.
    shard_files = [s["file"] for split in metadata["splits"].values() for s in split["shards"]]
    assert len(shard_files) == 4
    assert {f"{in_files}/{f}" for f in shard_files} <= set(names)
    assert {f"{in_files}/{f}" for f in ("metadata.json", "errors.jsonl", "labels.txt", "build.json")} <= set(names)
    assert [n for n in names if not n.startswith(in_files)] == ["out/metadata.json"], "and no lock left"
    assert not [n for n in names if TEMP_PREFIX in n or "transform_tmp" in n], names
    assert any(n.startswith(f"{in_files}/transform_fn/") for n in names)
    assert any(n.startswith(f"{in_files}/transformed_metadata/") for n in names)

    # The shards, downloaded through Beam's GCS client, read back with tf.data: the source bytes, unchanged.
    spec = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
            "image/filename": tf.io.FixedLenFeature([], tf.string),
            "image/class/text": tf.io.FixedLenFeature([], tf.string),
            "image/key/sha256": tf.io.FixedLenFeature([], tf.string)}
    manifest_folder = f"gs://{BUCKET}/in"
    seen = 0
    for split, info in metadata["splits"].items():
        for shard in info["shards"]:
            local = tmp_path / shard["file"]
            local.write_bytes(_read(f"{files}/{shard['file']}"))
            assert local.stat().st_size == shard["num_bytes"]
            assert f"{google_crc32c.value(local.read_bytes()):08x}" == shard["crc32c"], "checksummed as written"
            records = [tf.io.parse_single_example(r, spec) for r in tf.data.TFRecordDataset(str(local))]
            assert len(records) == shard["num_examples"]
            assert records[0]["image/key/sha256"].numpy().decode() == shard["first_key"]
            for record in records:
                uri = record["image/filename"].numpy().decode()
                absolute = uri if uri.startswith("gs://") else f"{manifest_folder}/{uri}"
                data = record["image/encoded"].numpy()
                assert data == images[absolute]
                assert record["image/key/sha256"].numpy().decode() == hashlib.sha256(data).hexdigest()
                assert f"/{split}_" in absolute and f"/{record['image/class/text'].numpy().decode()}/" in absolute
            seen += len(records)
    assert seen == metadata["num_examples"] == len(images)
    report = verify(out, sample=4)  # through Beam's GCS client: every shard hashed as read and checked
    assert report.ok and report.num_unhashed == 0, [p.line() for p in report.all_problems]

    # transform_fn/ (written into the bucket through Beam's GCS client) maps label text to labels.txt's ids.
    _download_tree(files, tmp_path / "dataset")
    transform_output = tft.TFTransformOutput(str(tmp_path / "dataset"))
    assert transform_output.vocabulary_by_name("labels") == [label.encode() for label in LABELS]
    layer = transform_output.transform_features_layer()
    queries = [*LABELS, "not a label"]
    mapped = layer({"label": tf.constant(queries), "rank_weight": tf.ones([len(queries)])})["label_id"]
    assert mapped.numpy().tolist() == [*range(len(LABELS)), -1]


def _shards_of(out: str) -> list[tuple[str, str]]:
    metadata = json.loads(_read(f"{out}/metadata.json"))
    return [(shard["file"], shard["crc32c"]) for split in metadata["splits"].values() for shard in split["shards"]]


def test_a_parquet_manifest_in_the_bucket_builds_the_same_shards_as_its_csv(built_on_gcs, uploaded, gcs):
    """The CSV manifest's rows written as Parquet into the bucket, read through Beam's GCS client row group by row
    group: the same shards, byte for byte, and the same rows rejected, named by their row number."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipeline import cli

    csv_manifest, _, num_rows = uploaded
    header, *rows = list(csv.reader(io.StringIO(_read(csv_manifest).decode())))
    written = pa.BufferOutputStream()
    pq.write_table(pa.table({name: [row[i] for row in rows] for i, name in enumerate(header)}), written,
                   row_group_size=8)
    gcs.bucket(BUCKET).blob("in/manifest.parquet").upload_from_string(written.getvalue().to_pybytes())
    manifest, out = f"gs://{BUCKET}/in/manifest.parquet", f"gs://{BUCKET}/out-parquet"

    assert cli.main(["build", "--manifest", manifest, "--output_dir", out, *BUILD_ARGS]) == 0
    csv_out, _ = built_on_gcs
    assert len(_shards_of(out)) == 4 and _shards_of(out) == _shards_of(csv_out)
    metadata = json.loads(_read(f"{out}/metadata.json"))
    errors = [json.loads(line) for line in _read(f"{out}/{metadata['build_dir']}/errors.jsonl").decode().splitlines()]
    assert metadata["num_input_rows"] == num_rows
    uris = [row[1] for row in rows]
    assert sorted((e["source"], e["line"], e["uri"]) for e in errors) == [
        (manifest, uris.index(uri) + 1, uri) for uri in ("images/cat/missing.jpg", "images/cat/truncated.jpg")]


def _published_files(gcs) -> dict[str, str]:
    """The published build's shards, errors.jsonl and labels.txt: name in the build's folder -> MD5."""
    build = json.loads(_read(f"gs://{BUCKET}/out/metadata.json"))["build_dir"]
    return {blob.name.rsplit("/", 1)[1]: blob.md5_hash for blob in gcs.list_blobs(BUCKET, prefix=f"out/{build}/")
            if ".tfrecord-" in blob.name or blob.name.endswith(("errors.jsonl", "labels.txt"))}


def test_a_label_file_in_the_bucket_sets_the_ids(uploaded, gcs, shardsmith, tmp_path, metadata_of):
    """--label_file gs://...: read through storage from the server; a duplicate there is the same one-line usage
    error as in a local file, before anything is written."""
    manifest, _, _ = uploaded
    bucket = gcs.bucket(BUCKET)
    bucket.blob("in/labels.txt").upload_from_string(b"emu\ncat\ndog\n")
    bucket.blob("in/twice.txt").upload_from_string(b"emu\ncat\nemu\n")

    twice = shardsmith("build", "--manifest", manifest, "--output_dir", tmp_path / "twice", *BUILD_ARGS,
                       "--label_file", f"gs://{BUCKET}/in/twice.txt")
    assert twice.code == 2
    assert f"--label_file gs://{BUCKET}/in/twice.txt line 3: label 'emu' is already on line 1" in twice.err
    assert not (tmp_path / "twice").exists()

    out = tmp_path / "out"
    built = shardsmith("build", "--manifest", manifest, "--output_dir", out, *BUILD_ARGS,
                       "--label_file", f"gs://{BUCKET}/in/labels.txt")
    assert built.code == 0, built.err
    metadata = metadata_of(out)
    assert metadata["labels"] == ["emu", "cat", "dog"]
    assert (out / metadata["build_dir"] / "labels.txt").read_text().splitlines() == ["emu", "cat", "dog"]
    assert verify(str(out)).ok


def test_preflight_lock_and_overwrite_work_on_gs_paths(built_on_gcs, uploaded, gcs, shardsmith):
    from shardsmith.output_folder.lock import acquire_lock

    out, _ = built_on_gcs
    manifest, _, _ = uploaded
    before = _published_files(gcs)

    refused = shardsmith("build", "--manifest", manifest, "--output_dir", out, *BUILD_ARGS)
    assert refused.code == 2
    assert "already holds a shardsmith dataset" in refused.err and "--overwrite" in refused.err

    missing = shardsmith("build", "--manifest", f"gs://{BUCKET}/in/nothing.csv", "--output_dir",
                         f"gs://{BUCKET}/other", *BUILD_ARGS)
    assert missing.code == 2 and "manifest not found" in missing.err

    lock = acquire_lock(out, "20260101T000000Z-0000abcd")  # a lock object on the server, held by this process
    try:
        locked = shardsmith("build", "--manifest", manifest, "--output_dir", out, *BUILD_ARGS, "--overwrite")
        assert locked.code == 2 and "is being built by build 20260101T000000Z-0000abcd" in locked.err
    finally:
        lock.release()
    assert not list(gcs.list_blobs(BUCKET, prefix="out/.shardsmith-lock"))

    gcs.bucket(BUCKET).blob("out/notes.txt").upload_from_string(b"the user's")
    shared = shardsmith("build", "--manifest", manifest, "--output_dir", out, *BUILD_ARGS, "--overwrite")
    assert shared.code == 2 and "holds files that no shardsmith build wrote (notes.txt)" in shared.err
    assert gcs.bucket(BUCKET).blob("out/notes.txt").download_as_bytes() == b"the user's"
    gcs.bucket(BUCKET).blob("out/notes.txt").delete()

    first_build = json.loads(_read(f"{out}/metadata.json"))["build_dir"]
    for _ in range(2):  # --keep_days 0: retired by --keep_builds alone
        again = shardsmith("build", "--manifest", manifest, "--output_dir", out, *BUILD_ARGS, "--overwrite",
                           "--keep_days", "0")
        assert again.code == 0, again.err
        assert _published_files(gcs) == before  # same inputs and seed: the same bytes, on gs:// too
    builds = {blob.name.split("/")[2] for blob in gcs.list_blobs(BUCKET, prefix="out/builds/")}
    assert len(builds) == 2 and first_build.split("/")[1] not in builds, "--keep_builds 2 retired the first"
    top = {blob.name for blob in gcs.list_blobs(BUCKET, prefix="out/") if not blob.name.startswith("out/builds/")}
    assert top == {"out/metadata.json", "out/retired.json"}  # retired.json: the versions retention removed
    retired = json.loads(_read(f"{out}/retired.json"))["retired"]
    assert [entry["version"] for entry in retired] == [first_build.split("/")[1]]


@pytest.fixture
def fake_dataflow_api():
    """A stand-in for the Dataflow REST API on localhost (the only part of this module that is not the real
    thing): it answers jobs.create with a job id and jobs.get with the state in `state["final"]`."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    state = {"final": "JOB_STATE_DONE", "requests": []}

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, job: dict) -> None:
            data = json.dumps(job).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            state["requests"].append(("POST", self.path, body))
            self._answer({"id": JOB_ID, "projectId": body.get("projectId"), "name": body.get("name"),
                          "clientRequestId": body.get("clientRequestId"), "currentState": "JOB_STATE_PENDING"})

        def do_GET(self):  # noqa: N802
            state["requests"].append(("GET", self.path, None))
            if "/messages" in self.path:  # a failed job's error message (Beam waits up to 50 s for one)
                failed = state["final"] == "JOB_STATE_FAILED"
                self._answer({"jobMessages": [{
                    "id": "1", "time": "2026-03-15T03:05:00Z", "messageImportance": "JOB_MESSAGE_ERROR",
                    "messageText": "Traceback (most recent call last): ... the workers failed"}] if failed else []})
            else:
                self._answer({"id": JOB_ID, "currentState": state["final"]})

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state["endpoint"] = f"http://localhost:{server.server_address[1]}/"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


JOB_ID = "2026-03-15_03_00_00-1234567890123456789"


def test_dataflow_submission_logs_the_job_id_and_console_url(gcs, fake_dataflow_api, shardsmith, tmp_path):
    """The CLI's DataflowRunner path: the job graph is built and pickled, staged to gs:// (the emulator) and
    created through the Dataflow API; Beam's "Created job with id" line and the console URL reach the log (what
    Airflow's Beam operator reads). By default the command waits for the job's final state (a failed job exits
    1 in one line); --no_wait_until_finish returns after submission. The launching machine reads no image: the
    manifest names one that does not exist, and submission succeeds anyway."""
    bucket = gcs.bucket(BUCKET)
    bucket.blob("submit/manifest.csv").upload_from_string("split,image_uri,label\ntrain,missing.jpg,cat\n")
    image = "europe-west4-docker.pkg.dev/test-project/shardsmith/shardsmith:abc123"
    args = ["build", "--manifest", f"gs://{BUCKET}/submit/manifest.csv", "--output_dir", f"gs://{BUCKET}/submitted",
            "--name", "pets", "--runner=DataflowRunner", "--project=test-project", "--region=europe-west4",
            f"--temp_location=gs://{BUCKET}/tmp", f"--staging_location=gs://{BUCKET}/staging",
            f"--sdk_container_image={image}", "--job_name=shardsmith-test",
            f"--dataflow_endpoint={fake_dataflow_api['endpoint']}", "--no_auth",
            # tf.transform's scratch folder is read at graph construction by TensorFlow's own GCS client, which
            # cannot reach the emulator (module docstring); on Dataflow it is gs://, under --temp_location.
            "--temp_dir", str(tmp_path / "tft"),
            # Beam would stage a `pip freeze` of this environment (5 s a submission here), which nothing reads.
            "--experiments=disable_logging_submission_environment"]

    submitted = shardsmith(*args, "--no_wait_until_finish")
    assert submitted.code == 0, submitted.err
    assert f"Created job with id: [{JOB_ID}]" in submitted.err
    assert f"https://console.cloud.google.com/dataflow/jobs/europe-west4/{JOB_ID}?project=test-project" in submitted.err
    posts = [r for r in fake_dataflow_api["requests"] if r[0] == "POST"]
    assert len(posts) == 1 and "/projects/test-project/locations/europe-west4/jobs" in posts[0][1]
    assert image in json.dumps(posts[0][2]) and posts[0][2]["name"] == "shardsmith-test"
    assert not [r for r in fake_dataflow_api["requests"] if r[0] == "GET"], "--no_wait_until_finish polled the job"
    staged = [b.name for b in gcs.list_blobs(BUCKET, prefix="staging/")]
    assert any(name.endswith("/pipeline.pb") for name in staged)

    # The job still runs (here: never, the API is a stand-in): the lock stays with it; its publish step releases it.
    lock = json.loads(gcs.bucket(BUCKET).blob("submitted/.shardsmith-lock").download_as_bytes())
    assert gcs.bucket(BUCKET).blob(f"submitted/builds/{lock['build_id']}/build.json").exists()
    overlapping = shardsmith(*args)
    assert overlapping.code == 2 and f"is being built by build {lock['build_id']}" in overlapping.err

    fake_dataflow_api["final"] = "JOB_STATE_FAILED"
    args[args.index(f"gs://{BUCKET}/submitted")] = f"gs://{BUCKET}/submitted-again"
    failed = shardsmith(*args)
    assert failed.code == 1
    assert f"Created job with id: [{JOB_ID}]" in failed.err
    assert "shardsmith: the job failed:" in failed.err and "FAILED" in failed.err
    assert [r for r in fake_dataflow_api["requests"] if r[0] == "GET"], "the default waits for the job"
    assert not list(gcs.list_blobs(BUCKET, prefix="submitted-again/.shardsmith-lock")), "a failed job's lock is freed"


def test_errors_jsonl_parts_are_merged_in_order_on_gs(gcs, monkeypatch):
    """errors.jsonl's sorted parts (transforms/error_parts.py) are merged line by line from gs:// objects, in rounds
    when there are more than PARTS_MERGED_AT_ONCE of them, into the same bytes as sorting every line at once."""
    from apache_beam.io.filesystems import FileSystems

    from shardsmith.format.build_record import write_atomically
    from transforms import error_parts

    lines = [json.dumps({"line": n, "reason": "r", "source": "m.csv", "stage": "lookup", "uri": f"u{n}"},
                        sort_keys=True).encode() + b"\n" for n in range(200)]
    shuffled = random.Random(1).sample(lines, len(lines))
    parts = []
    for at in range(0, len(shuffled), 7):
        parts.append(f"gs://{BUCKET}/errs/{TEMP_PREFIX}{error_parts.ERROR_PART_PREFIX}{at:03d}")
        write_atomically(parts[-1], b"".join(sorted(shuffled[at:at + 7], key=error_parts._line_order)))
    monkeypatch.setattr(error_parts, "PARTS_MERGED_AT_ONCE", 4)
    with FileSystems.open(error_parts.merge_error_parts(None, parts, f"gs://{BUCKET}/errs")) as merged:
        assert merged.read() == b"".join(lines)


def test_records_read_at_random_from_gs_are_the_local_copys(built_on_gcs, gcs, tmp_path):
    """shardsmith.records over gs:// (what ShardDataset reads through): record i at random is one ranged request
    for its bytes (storage.read_range), both CRCs checked, and equal to the same record of a local copy."""
    import shardsmith
    from shardsmith import storage

    out, _ = built_on_gcs
    local = tmp_path / "copy"
    for blob in gcs.list_blobs(BUCKET, prefix="out/"):
        if TEMP_PREFIX not in blob.name:
            target = local / blob.name.removeprefix("out/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(blob.download_as_bytes())
    remote, copied = shardsmith.records(out, "train"), shardsmith.records(str(local), "train")
    assert len(remote) == len(copied) > 3
    for i in random.Random(5).sample(range(len(remote)), 4) + [0, len(remote) - 1]:
        assert remote[i] == copied[i]
    shard = remote.shards[0].path
    data = gcs.bucket(BUCKET).blob(shard.removeprefix(f"gs://{BUCKET}/")).download_as_bytes()
    for offset, length in ((0, 12), (7, 100), (len(data) - 5, 5), (len(data) - 5, 50)):
        assert storage.read_range(shard, offset, length) == data[offset:offset + length]
