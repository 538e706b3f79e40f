"""Quiet by default: a real build and a real `load()` epoch, each in a fresh process (TensorFlow reads its log
settings once, when it loads), print none of TensorFlow's C++ log lines; SHARDSMITH_VERBOSE=1 brings them back.
The images include a grayscale PNG carrying an RGB colour profile (an iCCP chunk), which libpng warns about on
every decode."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image, ImageCms

ROOT = Path(__file__).resolve().parents[3]
TF_NOISE = ("cuda", "cuinit", "onednn", "absl::initializelog", "png warning", "cpu_feature_guard")


def _env(verbose: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHARDSMITH_", "TF_CPP_"))}
    env["PYTHONPATH"] = str(ROOT)
    if verbose:
        env["SHARDSMITH_VERBOSE"] = "1"
    return env


def _noise(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if any(word in line.lower() for word in TF_NOISE)]


@pytest.fixture(scope="module")
def profiled_build(tmp_path_factory) -> tuple[Path, str]:
    """A finished build whose train split holds a PNG with an iCCP chunk; and the build's stderr."""
    root = tmp_path_factory.mktemp("quiet")
    srgb = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    rows = []
    for i, split in enumerate(["train", "train", "validation", "test"]):
        image = Image.new("RGB", (24, 16), (40 * i, 90, 160))
        path = root / f"{i}.png"
        if i == 0:
            image.convert("L").save(path, icc_profile=srgb)
        else:
            image.save(path)
        rows.append(f"{split},{path},{'ab'[i % 2]}")
    (root / "manifest.csv").write_text("\n".join(rows) + "\n")
    out = root / "out"
    done = subprocess.run([sys.executable, "-m", "pipeline", "build", "--manifest", str(root / "manifest.csv"),
                           "--output_dir", str(out), "--name", "quiet"], env=_env(False), cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return out, done.stderr


def test_the_colour_profiled_png_makes_tensorflow_warn():
    """The test image is one libpng warns about, and only the quieting hides it."""
    buffer = io.BytesIO()
    Image.new("L", (8, 8)).save(buffer, "PNG", icc_profile=ImageCms.ImageCmsProfile(
        ImageCms.createProfile("sRGB")).tobytes())
    code = ("import sys, tensorflow as tf; "
            "tf.io.decode_image(sys.stdin.buffer.read(), channels=3, expand_animations=False)")
    done = subprocess.run([sys.executable, "-c", code], input=buffer.getvalue(), env=_env(False),
                          capture_output=True, timeout=120)
    assert done.returncode == 0 and b"PNG warning: iCCP" in done.stderr, done.stderr


def test_a_build_prints_no_tensorflow_log_lines_but_keeps_its_own(profiled_build):
    _, stderr = profiled_build
    assert _noise(stderr) == []
    assert "INFO wrote train shard 1 of 1" in stderr, "shardsmith's own log lines stay"


LOAD = ("import sys, shardsmith; "
        "print(sum(1 for _ in shardsmith.load(sys.argv[1], 'train', batch_size=None)))")


@pytest.mark.parametrize("verbose", [False, True], ids=["quiet", "verbose"])
def test_a_load_epoch_over_a_colour_profiled_png(profiled_build, verbose):
    out, _ = profiled_build
    done = subprocess.run([sys.executable, "-c", LOAD, str(out)], env=_env(verbose), cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.split() == ["2"], done.stderr
    noise = _noise(done.stderr)
    if verbose:
        assert any("PNG warning: iCCP" in line for line in noise), done.stderr
        assert any("absl::InitializeLog" in line for line in noise), done.stderr
    else:
        assert noise == [], done.stderr


@pytest.mark.parametrize("how", ["env", "flag"])
def test_verbose_build_shows_tensorflow_lines(tmp_path, profiled_build, how):
    """SHARDSMITH_VERBOSE=1 or --verbose, on a build that imports TensorFlow: one with --feature, whose
    statistics tensorflow-transform computes (a plain build imports no TensorFlow at all)."""
    out, _ = profiled_build
    rows = (out.parent / "manifest.csv").read_text().splitlines()
    manifest = tmp_path / "with_feature.csv"
    manifest.write_text("\n".join(["split,image_uri,label,age", *(f"{row},{i + 1}" for i, row in enumerate(rows))]))
    flag = ["--verbose"] if how == "flag" else []
    done = subprocess.run([sys.executable, "-m", "pipeline", "build", "--manifest", str(manifest),
                           "--output_dir", str(tmp_path / "out"), "--name", "quiet", "--feature", "age:float",
                           *flag],
                          env=_env(how == "env"), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert any("absl::InitializeLog" in line for line in _noise(done.stderr)), done.stderr


def test_what_the_tensorflow_import_writes_besides_its_log_lines_is_kept():
    code = ("import os, warnings; from shardsmith.tensorflow_import import exec_quietly; "
            "exec_quietly(lambda: (warnings.warn('kept'), os.write(2, b'I0000 00:00:1.5   7 port.cc:153] gone\\n"
            "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\\n"
            "F0000 00:00:1.5   7 x.cc:1] fatal stays\\n')))")
    done = subprocess.run([sys.executable, "-c", code], env=_env(False), cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "UserWarning: kept" in done.stderr and "fatal stays" in done.stderr
    assert "gone" not in done.stderr and "InitializeLog" not in done.stderr


def test_a_line_logged_after_stderr_was_closed_prints_no_logging_error_traceback(monkeypatch):
    """A writer pool's job thread may warn about a killed writer after the stream the build logged to was closed
    (a test's captured stderr, a closed pipe): the line is dropped, without logging's "--- Logging error ---"
    traceback on whatever stderr is by then."""
    import logging

    from pipeline.running.command_logs import configure_logging

    class _WriterDied(Exception):
        pass

    logged_to = io.StringIO()
    monkeypatch.setattr(sys, "stderr", logged_to)
    root = logging.getLogger()
    before = root.handlers[:], root.level
    try:
        configure_logging(local=True)
        logging.getLogger("shardsmith.test").info("written while the stream is open")
        assert "written while the stream is open" in logged_to.getvalue()
        logged_to.close()
        later = io.StringIO()
        monkeypatch.setattr(sys, "stderr", later)
        try:
            raise _WriterDied("killed by signal 9")
        except _WriterDied:
            logging.getLogger("shardsmith.test").warning("a shard writer process died; rewriting it once")
        assert later.getvalue() == ""
    finally:
        root.handlers[:] = before[0]
        root.setLevel(before[1])
