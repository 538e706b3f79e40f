"""Chaos: many builds into one output folder, each disturbed at a random moment, with checks after every step.

Each step runs `python -m pipeline build` on a small corpus into the same folder and, at a random moment,
does one of: nothing (the build runs to the end), kill -9 the launcher, SIGTERM the launcher, SIGINT the whole
process group (a terminal's Ctrl-C), kill -9 one of the build's child processes (a shard writer), or SIGSTOP
the launcher and run a second build with `--break_lock` beside it (which must be refused while the stopped
holder is alive on this host), then SIGCONT or kill -9 the stopped one. Steps
randomly add `--overwrite` (or leave it out, when a dataset is published: that build must be refused), and
a reader may open the published dataset before the step and finish reading it after.

After every step it asserts what an unattended schedule relies on:
- the build process and every process of its group ended within `--deadline_s` (no hang);
- a build that nobody disturbed succeeded (or was refused for a reason the step expects): nothing needs a person;
- the published dataset (if any) loads every split with the recorded counts, and verify (`shardsmith verify`'s
  checks, run in this process) passes;
- nothing outside `builds/` but `metadata.json`, `.shardsmith-lock` and `retired.json` (the versions retention
  removed) is in the output folder;
- the input images, the manifest and a user file beside the output folder are unchanged;
- a reader that opened the published build before the step reads it to the end with the same count.

The run ends with one undisturbed build, which must succeed. Prints one line per step and a summary; with
`--json` writes every step. Exit 0 when no step failed.

    python tests/benchmarks/chaos.py --steps 200 --seed 1 --json /tmp/shardsmith-chaos/steps.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ACTIONS = ("none", "kill9_launcher", "sigterm_launcher", "sigint_group", "kill9_child", "sigstop_takeover")
LOCK_FILE = ".shardsmith-lock"
ALLOWED_AT_TOP = {"builds", "metadata.json", LOCK_FILE, "retired.json"}
SPLITS = ("train", "validation", "test")
NAME = "chaos"
# A refused build (a published dataset without --overwrite, a live lock) exits 2.
USAGE_EXIT = 2


@dataclass
class StepResult:
    index: int
    action: str
    delay_s: float
    overwrite: bool
    reader: bool
    exit_code: int | None = None
    seconds: float = 0.0
    published: str | None = None
    failures: list[str] = field(default_factory=list)


def tree_hash(folder: Path) -> str:
    """SHA-256 over every file's relative path and bytes, in path order."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def descendants(pid: int) -> list[int]:
    """Every live process below pid, from /proc (children files)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                children = Path(f"/proc/{current}/task/{task}/children").read_text().split()
            except OSError:
                continue
            for child in map(int, children):
                found.append(child)
                todo.append(child)
    return found


def group_alive(pgid: int) -> list[int]:
    alive = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            alive.append(int(entry))
    return alive


class Chaos:
    def __init__(self, work: Path, seed: int, deadline_s: float, per_label: int) -> None:
        self.work = work
        self.rng = random.Random(seed)
        self.deadline_s = deadline_s
        self.data = work / "data"
        self.out = work / "out"  # the dataset folder (--output_dir); --name prefixes its files
        self.user_file = work / "notes.txt"
        self.env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT)}
        self.typical_s = 20.0
        self.children_seen: set[int] = set()
        if self.data.exists():
            shutil.rmtree(self.data)
        if (work / "out").exists():
            shutil.rmtree(work / "out")
        subprocess.run([sys.executable, "-m", "pipeline", "sample", str(self.data), "--per_label", str(per_label)],
                       check=True, env=self.env, capture_output=True, cwd=ROOT)
        self.user_file.write_text("a user's file beside the dataset: never touched\n")
        self.inputs_hash = tree_hash(self.data)
        self.user_bytes = self.user_file.read_bytes()

    def command(self, overwrite: bool, break_lock: bool = False) -> list[str]:
        command = [sys.executable, "-m", "pipeline", "build", "--manifest", str(self.data / "manifest.csv"),
                   "--output_dir", str(self.out), "--name", NAME,
                   "--num_shards", "train=4,validation=2,test=2", "--max_error_fraction", "0.25"]
        if overwrite:
            command.append("--overwrite")
        if break_lock:
            command.append("--break_lock")
        return command

    def published(self) -> dict | None:
        try:
            return json.loads((self.out / "metadata.json").read_text())
        except FileNotFoundError:
            return None

    def start(self, command: list[str], log: Path) -> subprocess.Popen:
        with log.open("w") as stream:
            return subprocess.Popen(command, stdout=stream, stderr=subprocess.STDOUT, env=self.env, cwd=ROOT,
                                    start_new_session=True)

    def finish(self, process: subprocess.Popen, result: StepResult) -> None:
        """Waits for the launcher and its whole process group, each within the deadline."""
        try:
            result.exit_code = process.wait(timeout=self.deadline_s)
        except subprocess.TimeoutExpired:
            result.failures.append(f"the build did not exit within {self.deadline_s:.0f} s (a hang)")
            os.killpg(process.pid, signal.SIGKILL)
            result.exit_code = process.wait()
        waited = time.monotonic()
        while left := self.left_behind(process.pid):
            if time.monotonic() - waited > 30:
                result.failures.append(f"{len(left)} process(es) of the build outlived it by 30 s: {left}")
                for pid in left:
                    os.kill(pid, signal.SIGKILL)
                break
            time.sleep(0.2)

    def holds_lock(self, pid: int) -> bool:
        """Whether the lock names `pid` (a stale lock of a killed build may be there before it takes over)."""
        try:
            return json.loads((self.out / LOCK_FILE).read_text()).get("pid") == pid
        except (OSError, ValueError, AttributeError):
            return False

    def left_behind(self, pgid: int) -> list[int]:
        """Processes of the build still alive: its group, and the children seen during the step (shard writers
        run in process groups of their own)."""
        alive = set(group_alive(pgid))
        for pid in self.children_seen:
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if state != "Z" and (b"pipeline" in cmdline or b"shardsmith" in cmdline):
                alive.add(pid)
        return sorted(alive)

    def disturb(self, process: subprocess.Popen, result: StepResult, log_dir: Path) -> None:
        time.sleep(result.delay_s)
        if process.poll() is not None:
            return
        self.children_seen = set(descendants(process.pid))
        if result.action == "kill9_launcher":
            os.kill(process.pid, signal.SIGKILL)
        elif result.action == "sigterm_launcher":
            os.kill(process.pid, signal.SIGTERM)
        elif result.action == "sigint_group":
            os.killpg(process.pid, signal.SIGINT)
        elif result.action == "kill9_child":
            children = descendants(process.pid)
            if children:
                os.kill(self.rng.choice(children), signal.SIGKILL)
        elif result.action == "sigstop_takeover":
            # Stopped while it holds the lock: before that, a second build simply runs.
            while not self.holds_lock(process.pid) and process.poll() is None:
                time.sleep(0.05)
            if process.poll() is not None:
                return
            os.kill(process.pid, signal.SIGSTOP)
            second = subprocess.run(self.command(overwrite=True, break_lock=True), capture_output=True, text=True,
                                    env=self.env, cwd=ROOT, timeout=self.deadline_s)
            (log_dir / f"step-{result.index:04d}-takeover.log").write_text(second.stdout + second.stderr)
            if second.returncode != USAGE_EXIT:
                result.failures.append(f"--break_lock beside a stopped live holder exited {second.returncode}, "
                                       "expected a refusal (2)")
            if self.rng.random() < 0.5:
                os.kill(process.pid, signal.SIGCONT)
            else:
                os.kill(process.pid, signal.SIGKILL)
                os.kill(process.pid, signal.SIGCONT)

    def check_folder(self, result: StepResult, reader_state) -> None:
        if self.out.exists():
            stray = sorted(set(os.listdir(self.out)) - ALLOWED_AT_TOP)
            if stray:
                result.failures.append(f"files outside builds/: {stray}")
        if tree_hash(self.data) != self.inputs_hash:
            result.failures.append("the input images or manifest changed")
        if not self.user_file.exists() or self.user_file.read_bytes() != self.user_bytes:
            result.failures.append("the user's file beside the output folder was touched")
        metadata = self.published()
        if metadata is not None:
            result.published = metadata.get("build_id")
            self.check_published(metadata, result)
        if reader_state is not None:
            iterator, expected, already = reader_state
            try:
                count = already + sum(1 for _ in iterator)
            except Exception as error:  # noqa: BLE001 - a reader failing loudly is itself the finding
                result.failures.append(f"a reader opened before the step failed: {type(error).__name__}: {error}")
            else:
                if count != expected:
                    result.failures.append(f"a reader opened before the step read {count} of {expected} records")

    def check_published(self, metadata: dict, result: StepResult) -> None:
        import shardsmith
        from shardsmith.read.verify import verify

        for split in SPLITS:
            expected = metadata["splits"].get(split, {}).get("num_examples", 0)
            if not expected:
                continue
            try:
                count = sum(1 for _ in shardsmith.load(str(self.out), split, batch_size=None,
                                                       shuffle_buffer=None))
            except Exception as error:  # noqa: BLE001
                result.failures.append(f"load({split}) failed: {type(error).__name__}: {str(error)[:300]}")
                continue
            if count != expected:
                result.failures.append(f"load({split}) gave {count} records, metadata.json says {expected}")
        # In this process, which loaded TensorFlow for load() above: a `verify` process would import it again
        # (about 6 s of CPU a step) to run the same checks.
        try:
            report = verify(str(self.out))
        except Exception as error:  # noqa: BLE001 - a verify that cannot run is itself the finding
            result.failures.append(f"verify failed: {type(error).__name__}: {str(error)[:300]}")
            return
        if not report.ok:
            result.failures.append(f"verify found {report.num_problems} problem(s): "
                                   f"{[p.line() for p in report.all_problems][:3]}")

    def open_reader(self):
        import shardsmith

        metadata = self.published()
        if metadata is None:
            return None
        expected = metadata["splits"]["train"]["num_examples"]
        iterator = iter(shardsmith.load(str(self.out), "train", batch_size=None, shuffle_buffer=None))
        already = sum(1 for _ in zip(range(5), iterator, strict=False))
        return iterator, expected, already

    def step(self, index: int, action: str | None = None, overwrite: bool | None = None) -> StepResult:
        action = action or self.rng.choice(ACTIONS)
        published_before = self.published() is not None
        if overwrite is None:
            overwrite = self.rng.random() < (0.8 if published_before else 0.2)
        result = StepResult(index, action, round(self.rng.uniform(0.2, self.typical_s), 2), overwrite,
                            reader=published_before and self.rng.random() < 0.3)
        reader_state = self.open_reader() if result.reader else None
        log_dir = self.work / "logs"
        log_dir.mkdir(exist_ok=True)
        started = time.monotonic()
        process = self.start(self.command(overwrite), log_dir / f"step-{index:04d}.log")
        self.children_seen = set()
        if action != "none":
            self.disturb(process, result, log_dir)
        self.finish(process, result)
        result.seconds = round(time.monotonic() - started, 2)
        disturbed = action != "none" and result.seconds > result.delay_s
        if not disturbed:
            refused = published_before and not overwrite
            wanted = USAGE_EXIT if refused else 0
            if result.exit_code != wanted:
                log = (log_dir / f"step-{index:04d}.log").read_text()[-500:]
                result.failures.append(f"an undisturbed build exited {result.exit_code}, expected {wanted}: {log}")
            elif action == "none" and not refused:
                self.typical_s = max(5.0, 0.7 * self.typical_s + 0.3 * result.seconds)
        self.check_folder(result, reader_state)
        return result


def run(argv: list[str] | None = None) -> list[StepResult]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--per_label", type=int, default=20, help="demo images per label (sample's 3 labels)")
    parser.add_argument("--deadline_s", type=float, default=180.0, help="the longest a step's build may run")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/shardsmith-chaos"))
    parser.add_argument("--json", type=Path, help="write every step's result here")
    parser.add_argument("--actions", help="comma-separated actions to cycle through instead of random ones "
                        f"(of: {', '.join(ACTIONS)})")
    args = parser.parse_args(argv)
    chaos = Chaos(args.workdir, args.seed, args.deadline_s, args.per_label)
    cycle = args.actions.split(",") if args.actions else None
    if cycle and set(cycle) - set(ACTIONS):
        parser.error(f"--actions: unknown {sorted(set(cycle) - set(ACTIONS))}")
    results = []
    for index in range(args.steps):
        results.append(chaos.step(index, action=cycle[index % len(cycle)] if cycle else None))
        print_step(results[-1])
    results.append(chaos.step(args.steps, action="none", overwrite=True))
    print_step(results[-1])
    failed = [r for r in results if r.failures]
    print(f"chaos: {len(results)} steps ({args.steps} random and a final undisturbed build), "
          f"{len(failed)} failed; actions: "
          + ", ".join(f"{a} {sum(r.action == a for r in results)}" for a in ACTIONS))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1))
    return results


def print_step(result: StepResult) -> None:
    verdict = "ok" if not result.failures else "FAIL: " + " | ".join(result.failures)
    print(f"step {result.index:4d} {result.action:17s} at {result.delay_s:5.1f}s overwrite={int(result.overwrite)} "
          f"reader={int(result.reader)} exit={result.exit_code} {result.seconds:6.1f}s {verdict}", flush=True)


if __name__ == "__main__":
    sys.exit(1 if any(r.failures for r in run()) else 0)
