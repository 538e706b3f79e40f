"""Chaos: many builds, nights and compactions into one output folder, each disturbed at a random moment, some after
the published version was tampered with, with checks after every step.

Each step is one of four kinds (`--json` and the step line name it):
- build: `python -m pipeline build` of the manifest as it is (a full build, --max_error_fraction 0.25);
- night: the manifest changes as a nightly export's would (rows added and removed, sometimes reordered, a few
  broken rows that stay broken until one is fixed, now and then a new broken row: tests/benchmarks/chaos_nights.py),
  then `build --incremental --max_error_fraction 0.05` (into the folder of a build or a night alike), now and
  then with `--overwrite`;
- compact: `shardsmith compact OUT`, sometimes with `--compact_after K`;
- tamper: the published version is changed first (a row list deleted, a line dropped from one or two swapped, a
  shard's "build" or "file" in metadata.json pointed outside the folder, metadata.json corrupted), then a night
  or a compaction runs undisturbed. It must either refuse (exit 2, or the check-failed exit, with one line and
  no traceback, and metadata.json unchanged) or publish a correct version (the checks below); then, if it
  refused, the folder is put right the way the message tells a person (`--incremental --overwrite`, moving
  out a metadata.json it names), which must succeed.
Every build, night and compaction takes `--keep_builds` 1 to 3, and at a random moment one of: nothing (it runs
to the end), kill -9 the launcher, SIGTERM the launcher, SIGINT the whole process group (a terminal's Ctrl-C),
kill -9 one of its child processes (a shard writer), or SIGSTOP the launcher and run the same command with
`--break_lock` beside it (which must be refused while the stopped holder is alive on this host), then SIGCONT or
kill -9 the stopped one. Builds randomly add `--overwrite` (or leave it out, when a dataset is published: that
build must be refused). A reader may open a kept version (`shardsmith.records` or `load` with `version=ID`, the
published one or an older one) before the step and finish reading it after.

After every step it asserts what an unattended schedule relies on:
- the process and every process of its group ended within `--deadline_s` (no hang);
- a step nobody disturbed exited as expected: builds and nights succeed (or are refused for a reason the step
  expects: a published dataset without --overwrite, a night bringing a new broken row over the 5% budget, a
  compaction of a version in one generation), and publish exactly when the manifest's rows changed; nothing
  needs a person;
- the published version loads every split with the recorded counts, verify (`shardsmith verify`'s checks, run
  in this process) passes, its records are exactly the good rows of the manifest it was built from (URI, label,
  split where the row names one; a compaction's are its version's), each record's label id is its label's id,
  and its errors.jsonl lists exactly the broken rows;
- label ids never change meaning: a night, a compaction or an `--incremental --overwrite` keeps every published
  label's id; a full build that renumbers says so; every kept version still lists the labels it was published
  with, the same ids within each numbering; every version `shardsmith versions` lists still has its shards;
- nothing outside `builds/` but `metadata.json`, `.shardsmith-lock` and `retired.json` (the versions retention
  removed) is in the output folder, nothing is read or written in the folder the tampered names point to, and
  the input images, the manifest and a user file beside the output folder are unchanged (but for the harness's
  own nightly changes);
- a reader that opened a version before the step reads it to the end with the same records, or (only when
  retention removed that version's files during the step) fails with an exception: never silently short.

The run ends with one undisturbed night, which must succeed. Prints one line per step and a summary (steps of each
kind, tampers refused and repaired); with `--json` writes every step. Exit 0 when no step failed.

    python tests/benchmarks/chaos.py --steps 200 --seed 1 --json /tmp/shardsmith-chaos/steps.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from chaos_nights import TAMPERS, NightPlan, Nights, Outside, tamper  # noqa: E402
from chaos_versions import Reader, Versions, version_problems  # noqa: E402

ACTIONS = ("none", "kill9_launcher", "sigterm_launcher", "sigint_group", "kill9_child", "sigstop_takeover")
KINDS = ("build", "night", "compact", "tamper")
KIND_WEIGHTS = (0.15, 0.45, 0.2, 0.2)
LOCK_FILE = ".shardsmith-lock"
ALLOWED_AT_TOP = {"builds", "metadata.json", LOCK_FILE, "retired.json"}
SPLITS = ("train", "validation", "test")
NAME = "chaos"
# A refused build (a published dataset without --overwrite, a live lock) exits 2; a failed check exits 1 with
# one line starting with this (transforms/report.py's CHECK_FAILED_MARKER).
USAGE_EXIT = 2
CHECK_EXIT = 1
CHECK_FAILED = "shardsmith check failed: "
USAGE_LINE = "shardsmith: error: "
# Row-list tampers stay in the build folders of carried shards after a night publishes over them: until a full
# build or a compaction replaces every shard, a later step may refuse cleanly (and the folder is then restored).
LASTING_TAMPERS = ("delete_row_list", "drop_row_line", "swap_row_lines")


@dataclass
class StepResult:
    index: int
    kind: str  # build, night, compact or tamper
    action: str
    delay_s: float  # when the action was due; `disturbed` says whether the command was still running then
    overwrite: bool
    reader: bool
    disturbed: bool = False
    command: str = ""  # what ran: build, night or compact (a tamper step runs a night or a compaction)
    keep_builds: int | None = None
    compact_after: int | None = None
    plan: dict | None = None  # a night's change to the manifest
    tamper: str | None = None
    tampered: str | None = None  # what the tamper did
    tamper_verdict: str | None = None  # refused, repaired, or unsafe (refused unclearly, or published wrong)
    restored: bool = False  # the folder was put right after the step, as its message tells a person
    restored_by: list[str] = field(default_factory=list)  # how: each command run after the step, and its exit
    reader_version: str | None = None
    reader_outcome: str | None = None
    exit_code: int | None = None
    seconds: float = 0.0
    published: str | None = None
    new_version: bool = False
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


def clean_refusal(exit_code: int | None, log: str) -> bool:
    """A refusal a person can act on: exit 2 with the usage line, or the check-failed exit with its line, and no
    traceback."""
    if "Traceback" in log:
        return False
    lines = log.splitlines()
    if exit_code == USAGE_EXIT:
        return any(line.startswith(USAGE_LINE) for line in lines)
    return exit_code == CHECK_EXIT and any(line.startswith(CHECK_FAILED) for line in lines)


class Chaos:
    def __init__(self, work: Path, seed: int, deadline_s: float, per_label: int) -> None:
        self.work = work
        self.rng = random.Random(seed)
        self.deadline_s = deadline_s
        self.data = work / "data"
        self.out = work / "out"  # the dataset folder (--output_dir); --name prefixes its files
        self.user_file = work / "notes.txt"
        self.moved = work / "moved"  # files a refusal told the person to move out of the output folder
        self.logs = work / "logs"
        self.env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT)}
        # How long a command runs undisturbed (builds, nights and compactions alike, within a few seconds here):
        # set by the first such run, then a moving average; actions are due within it.
        self.typical_s: float | None = None
        self.children_seen: set[int] = set()
        for stale in (self.data, self.out, self.moved, self.logs, work / "outside"):
            if stale.exists():
                shutil.rmtree(stale)
        self.logs.mkdir(parents=True)
        self.nights = Nights(self.data, per_label, self.rng)
        self.outside = Outside(work / "outside")
        self.user_file.write_text("a user's file beside the dataset: never touched\n")
        self.inputs_hash = tree_hash(self.data)
        self.user_bytes = self.user_file.read_bytes()
        self.versions = Versions(self.out, self.rng)
        self.tainted: str | None = None  # a row-list tamper that a carried shard may still meet

    # Commands ---------------------------------------------------------------------------------------------------

    def command(self, result: StepResult, plan: NightPlan | None = None, break_lock: bool = False) -> list[str]:
        # --keep_days 0: versions retire by --keep_builds alone, so that retirement happens within a run
        keep = ["--keep_days", "0", "--keep_builds", str(result.keep_builds)] if result.keep_builds else []
        if result.command == "compact":
            command = [sys.executable, "-m", "pipeline", "compact", str(self.out), *keep]
            if result.compact_after is not None:
                command += ["--compact_after", str(result.compact_after)]
            return command + (["--break_lock"] if break_lock else [])
        command = [sys.executable, "-m", "pipeline", "build", "--manifest", str(self.nights.manifest),
                   "--output_dir", str(self.out), "--name", NAME, "--num_shards", "train=4,validation=2,test=2",
                   *keep]
        if result.command == "night":
            command += ["--incremental", "--max_error_fraction", "0.05"]
            if plan is not None and plan.max_removed_fraction is not None:
                command += ["--max_removed_fraction", str(plan.max_removed_fraction)]
        else:
            command += ["--max_error_fraction", "0.25"]
        if result.overwrite or break_lock:
            command.append("--overwrite")
        if break_lock:
            command.append("--break_lock")
        return command

    def published(self) -> dict | None:
        """The top-level metadata.json, or None when there is none or it is not a JSON object (a tamper left)."""
        try:
            metadata = json.loads((self.out / "metadata.json").read_text())
        except (FileNotFoundError, ValueError):
            return None
        return metadata if isinstance(metadata, dict) else None

    def published_id(self) -> str | None:
        metadata = self.published()
        return metadata.get("build_id") if isinstance(metadata, dict) else None

    def start(self, command: list[str], log: Path) -> subprocess.Popen:
        with log.open("w") as stream:
            return subprocess.Popen(command, stdout=stream, stderr=subprocess.STDOUT, env=self.env, cwd=ROOT,
                                    start_new_session=True)

    def finish(self, process: subprocess.Popen, result: StepResult) -> None:
        """Waits for the launcher and its whole process group, each within the deadline."""
        try:
            result.exit_code = process.wait(timeout=self.deadline_s)
        except subprocess.TimeoutExpired:
            result.failures.append(f"the {result.command} did not exit within {self.deadline_s:.0f} s (a hang)")
            os.killpg(process.pid, signal.SIGKILL)
            result.exit_code = process.wait()
        waited = time.monotonic()
        while left := self.left_behind(process.pid):
            if time.monotonic() - waited > 30:
                result.failures.append(f"{len(left)} process(es) of the {result.command} outlived it by 30 s: {left}")
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

    def disturb(self, process: subprocess.Popen, result: StepResult, plan: NightPlan | None) -> None:
        """At `delay_s` (unless it ended before), does the step's action; sets `result.disturbed`."""
        try:
            process.wait(timeout=result.delay_s)
            return  # it ended first: an undisturbed run, judged as one
        except subprocess.TimeoutExpired:
            pass
        self.children_seen = set(descendants(process.pid))
        result.disturbed = True
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
            # Stopped while it holds the lock: before that, a second one simply runs.
            while not self.holds_lock(process.pid) and process.poll() is None:
                time.sleep(0.05)
            if process.poll() is not None:
                result.disturbed = False
                return
            os.kill(process.pid, signal.SIGSTOP)
            if not self.holds_lock(process.pid):  # it released the lock between the look and the stop
                os.kill(process.pid, signal.SIGCONT)
                result.disturbed = False
                return
            second = subprocess.run(self.command(result, plan, break_lock=True), capture_output=True, text=True,
                                    env=self.env, cwd=ROOT, timeout=self.deadline_s)
            (self.logs / f"step-{result.index:04d}-takeover.log").write_text(second.stdout + second.stderr)
            if second.returncode != USAGE_EXIT:
                result.failures.append(f"--break_lock beside a stopped live holder exited {second.returncode}, "
                                       "expected a refusal (2)")
            if self.rng.random() < 0.5:
                os.kill(process.pid, signal.SIGCONT)
            else:
                os.kill(process.pid, signal.SIGKILL)
                os.kill(process.pid, signal.SIGCONT)

    # What a step should do ----------------------------------------------------------------------------------------

    def expected_exit(self, result: StepResult, plan: NightPlan | None) -> tuple[int, bool]:
        """(exit status, whether it publishes) for an undisturbed step, from the published version before it."""
        published = self.published()
        incremental = (published or {}).get("incremental")
        before = self.versions.expected.get(self.published_id() or "")
        if result.command == "build":
            refused = published is not None and not result.overwrite
            return (USAGE_EXIT, False) if refused else (0, True)
        if result.command == "night":
            if published is None or result.overwrite:
                return 0, True
            if incremental is None:
                return USAGE_EXIT, False  # a version from before builds listed their rows: --overwrite once
            if plan is not None and plan.new_broken:
                return CHECK_EXIT, False  # a new failed row over the night's 5% budget
            now = self.nights.expected()
            return 0, before is None or now.rows != before.rows
        from shardsmith.format.metadata import read_metadata
        from shardsmith.versions.compaction import most_generations

        if published is None or incremental is None:
            return USAGE_EXIT, False
        if result.compact_after is not None:
            return 0, most_generations(read_metadata(str(self.out))) > result.compact_after
        return (USAGE_EXIT, False) if incremental.get("generations", 1) <= 1 else (0, True)

    def plan_step(self, result: StepResult, final: bool) -> NightPlan | None:
        """Chooses the step's flags; for a night, changes the manifest."""
        published = self.published()
        before = self.versions.expected.get(self.published_id() or "")
        result.keep_builds = None if final else self.rng.choice((None, 1, 2, 3))
        if result.command == "compact":
            result.overwrite = False
            if result.kind != "tamper" and self.rng.random() < 0.4:  # a tampered step must have work to do
                result.compact_after = self.rng.choice((1, 2, 3))
            return None
        if result.command == "build":
            return None
        result.overwrite = self.rng.random() < (0.1 if published is not None else 0.2) and result.kind != "tamper"
        if final:  # the last night must succeed: it follows what a refusal would have said
            result.overwrite = result.overwrite or self.tainted is not None
        plan = self.nights.night(before, may_break=result.kind == "night" and not result.overwrite and not final
                                 and published is not None)
        if result.kind == "tamper" and plan.added == 0:
            self.nights.add_one_row()
            plan.added = 1
        result.plan = {k: v for k, v in asdict(plan).items() if v}
        self.inputs_hash = tree_hash(self.data)  # the harness's own change to the inputs
        return plan

    # A step -------------------------------------------------------------------------------------------------------

    def step(self, index: int, kind: str | None = None, action: str | None = None, overwrite: bool | None = None,
             tamper_kind: str | None = None, final: bool = False) -> StepResult:
        drawn = kind is None
        kind = kind or self.rng.choices(KINDS, KIND_WEIGHTS)[0]
        published = self.published()
        incremental = (published or {}).get("incremental")
        if kind == "tamper" and incremental is None:
            kind = "night"  # nothing to tamper with that a night or a compaction would read
        if drawn and kind == "compact" and (incremental or {}).get("generations", 1) <= 1 and self.rng.random() < 0.6:
            kind = "night"  # mostly compact versions that have generations to compact
        action = "none" if kind == "tamper" else action or self.rng.choice(ACTIONS)
        published_before = published is not None
        if overwrite is None:
            overwrite = self.rng.random() < (0.8 if published_before else 0.2)
        result = StepResult(index, kind, action, 0.0, overwrite,
                            reader=published_before and self.rng.random() < 0.4)
        if kind == "tamper":
            generations = (published.get("incremental") or {}).get("generations", 1)
            result.command = "compact" if generations > 1 and self.rng.random() < 0.4 else "night"
        else:
            result.command = kind
        result.delay_s = round(self.rng.uniform(0.2, self.typical_s or 10.0), 2)
        plan = self.plan_step(result, final)
        reader = self.versions.open_reader(result) if result.reader else None
        before_id = self.published_id()
        top_before = None
        if kind == "tamper":
            result.tamper = tamper_kind or self.rng.choice(TAMPERS)
            self.versions.tampered.add(before_id)
            result.tampered, rows = tamper(result.tamper, self.out, self.outside, self.rng)
            if plan is not None and rows and self.rng.random() < 0.5 and self.nights.remove(rows[0]):
                # The night removes a row of the tampered list: its shard is rewritten from that list.
                plan.max_removed_fraction = 0.5
                result.plan["removed_tampered_row"] = rows[0]
                self.inputs_hash = tree_hash(self.data)
            top_before = (self.out / "metadata.json").read_bytes()
        wanted, publishes = self.expected_exit(result, plan) if kind != "tamper" else (0, True)
        snapshot = self.nights.expected()
        log = self.logs / f"step-{index:04d}.log"
        started = time.monotonic()
        process = self.start(self.command(result, plan), log)
        self.children_seen = set()
        if action != "none":
            self.disturb(process, result, plan)
        self.finish(process, result)
        result.seconds = round(time.monotonic() - started, 2)
        self.check_outside(result, "the step")
        after_id = self.published_id()
        result.new_version = after_id is not None and after_id != before_id
        if result.new_version:
            self.versions.note(result, after_id, before_id, snapshot, log.read_text())
            if result.command == "compact" or result.overwrite or result.command == "build":
                self.tainted = None  # every shard of the new version is its own, with fresh row lists
        text = log.read_text()
        if kind == "tamper":
            self.judge_tamper(result, text, top_before, plan)
        elif not result.disturbed:
            self.judge_exit(result, text, wanted, publishes, plan)
        self.check_folder(result, reader)
        if result.tamper_verdict == "repaired" and result.failures:
            # It published a wrong version: known now, and put right so that later steps judge their own work.
            result.tamper_verdict = "unsafe"
            self.versions.tampered.add(after_id)
            result.restored = self.restore(result, "", None)
        return result

    def judge_exit(self, result: StepResult, log: str, wanted: int, publishes: bool, plan: NightPlan | None) -> None:
        if self.tainted and result.exit_code != wanted and not result.new_version \
                and clean_refusal(result.exit_code, log):
            result.restored = self.restore(result, log, plan)  # a row-list tamper a night publishing over it left
            return
        if result.exit_code != wanted:
            result.failures.append(f"an undisturbed {result.command} exited {result.exit_code}, expected {wanted}: "
                                   f"{log[-500:]}")
            return
        if wanted != 0 and not clean_refusal(result.exit_code, log):
            result.failures.append(f"an undisturbed {result.command} refused without one clear line: {log[-500:]}")
        if wanted == 0 and publishes != result.new_version:
            result.failures.append(f"an undisturbed {result.command} " + ("published nothing" if publishes else
                                   "published a version though nothing changed") + f": {log[-300:]}")
        if wanted == 0:  # an undisturbed run to the end: how long one takes, for the next delays
            typical = self.typical_s or result.seconds
            self.typical_s = max(1.0, 0.7 * typical + 0.3 * result.seconds)

    def judge_tamper(self, result: StepResult, log: str, top_before: bytes, plan: NightPlan | None) -> None:
        """Refused cleanly with nothing published, or published a version (which the checks then judge)."""
        top_after = (self.out / "metadata.json").read_bytes() if (self.out / "metadata.json").exists() else None
        if result.exit_code == 0 and result.new_version:
            result.tamper_verdict = "repaired"
            if result.tamper in LASTING_TAMPERS:
                self.tainted = f"step {result.index}: {result.tampered}"
            return
        if top_after != top_before:
            result.failures.append(f"a tampered {result.command} that published no version changed metadata.json")
        if clean_refusal(result.exit_code, log) and top_after == top_before:
            result.tamper_verdict = "refused"
        else:
            result.tamper_verdict = "unsafe"
            result.failures.append(f"a tampered {result.command} neither refused with one clear line nor published: "
                                   f"exit {result.exit_code}: {log[-400:]}")
        result.restored = self.restore(result, log, plan)

    def restore(self, result: StepResult, refusal: str, plan: NightPlan | None) -> bool:
        """Puts the folder right as the refusal tells a person to. A row list that does not describe its shard:
        delete it and run the same command again (half the time), or `build --incremental --overwrite` of the
        manifest, after moving out of the folder a file that a refusal names. Returns whether it worked."""
        listed = re.search(r"(/\S+\.jsonl)\b[^\n]*; restore it as the build wrote it, or delete it", refusal)
        for attempt in range(3):
            if not listed or self.rng.random() < 0.5:
                break
            path = Path(listed.group(1))
            if self.out not in path.parents or not path.is_file():
                break
            path.unlink()
            again = replace(result, failures=[])
            code, text = self.run_undisturbed(again, plan, f"advice-{attempt}")
            result.failures.extend(again.failures)
            result.restored_by.append(f"deleted {path.relative_to(self.out)}, ran the {result.command} again: "
                                      f"exit {code}")
            if code == 0:
                return True
            if not clean_refusal(code, text):
                result.failures.append(f"after deleting {path.name} as the refusal said, the {result.command} "
                                       f"exited {code}: {text[-400:]}")
                break
            listed = re.search(r"(/\S+\.jsonl)\b[^\n]*; restore it as the build wrote it, or delete it", text)
        restore = replace(result, command="night", overwrite=True, keep_builds=None, compact_after=None, failures=[])
        for attempt in range(3):
            code, text = self.run_undisturbed(restore, None, f"restore-{attempt}")
            result.failures.extend(restore.failures)
            restore.failures = []
            result.restored_by.append(f"build --incremental --overwrite: exit {code}")
            if code == 0:
                return True
            named = re.search(r"move (\S+) out of the folder", text)
            if code == USAGE_EXIT and named and (self.out / named.group(1)).exists():
                self.moved.mkdir(exist_ok=True)
                shutil.move(self.out / named.group(1), self.moved / f"{named.group(1)}.step-{result.index}")
                if named.group(1) == "metadata.json":
                    self.versions.metadata_moved_out()
                result.restored_by.append(f"moved {named.group(1)} out of the folder")
                continue
            break
        result.failures.append(f"the folder could not be put right with --incremental --overwrite: {text[-400:]}")
        return False

    def run_undisturbed(self, result: StepResult, plan: NightPlan | None, name: str) -> tuple[int, str]:
        """Runs the step's command to the end (a restore), noting a version it publishes; (exit status, log)."""
        before_id = self.published_id()
        log = self.logs / f"step-{result.index:04d}-{name}.log"
        snapshot = self.nights.expected()
        with log.open("w") as stream:
            code = subprocess.run(self.command(result, plan), stdout=stream, stderr=subprocess.STDOUT, env=self.env,
                                  cwd=ROOT, timeout=self.deadline_s).returncode
        text = log.read_text()
        after_id = self.published_id()
        if after_id is not None and after_id != before_id:
            self.versions.note(result, after_id, before_id, snapshot, text)
            if result.command == "compact" or result.overwrite:
                self.tainted = None
        elif code == 0 and result.kind == "tamper" and result.command == "night" and not result.overwrite:
            result.failures.append(f"the {result.command} run again after its refusal published nothing")
        return code, text

    # Checks -------------------------------------------------------------------------------------------------------

    def check_outside(self, result: StepResult, who: str) -> None:
        touched = self.outside.touched()
        if touched:
            result.failures.append(f"{who} touched files outside the dataset folder: {touched[:3]}")
            self.outside.reset()

    def check_folder(self, result: StepResult, reader: Reader | None) -> None:
        if self.out.exists():
            stray = sorted(set(os.listdir(self.out)) - ALLOWED_AT_TOP)
            if stray:
                result.failures.append(f"files outside builds/: {stray}")
        stray = sorted(set(os.listdir(self.work)) - {"data", "out", "notes.txt", "logs", "outside", "moved"})
        if stray:
            result.failures.append(f"new files beside the output folder: {stray}")
        if tree_hash(self.data) != self.inputs_hash:
            result.failures.append("the input images or manifest changed")
        if not self.user_file.exists() or self.user_file.read_bytes() != self.user_bytes:
            result.failures.append("the user's file beside the output folder was touched")
        metadata = self.published()
        if metadata is not None:
            result.published = metadata.get("build_id")
            self.check_published(metadata, result)
            self.versions.check_kept(result, self.published_id())
        if reader is not None:
            self.versions.finish_reader(result, reader)
        self.check_outside(result, "reading the dataset back (load, records, verify)")

    def check_published(self, metadata: dict, result: StepResult) -> None:
        import shardsmith
        from shardsmith.read.dataset_checks import verify

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
        version = metadata.get("build_id")
        if version not in self.versions.expected:
            result.failures.append(f"the published version {version} was published by no step of this run")
            return
        try:
            result.failures.extend(version_problems(self.out, version, self.versions.expected[version]))
        except Exception as error:  # noqa: BLE001
            result.failures.append(f"reading version {version}'s records failed: {type(error).__name__}: "
                                   f"{str(error)[:300]}")

def run(argv: list[str] | None = None) -> list[StepResult]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--per_label", type=int, default=20, help="demo images per label (sample's 3 labels; "
                        "at least 16)")
    parser.add_argument("--deadline_s", type=float, default=180.0, help="the longest a step's command may run")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/shardsmith-chaos"))
    parser.add_argument("--json", type=Path, help="write every step's result here")
    parser.add_argument("--actions", help="comma-separated actions to cycle through instead of random ones "
                        f"(of: {', '.join(ACTIONS)})")
    parser.add_argument("--kinds", help=f"comma-separated step kinds to cycle through (of: {', '.join(KINDS)})")
    parser.add_argument("--tampers", help=f"comma-separated tampers to cycle through (of: {', '.join(TAMPERS)})")
    args = parser.parse_args(argv)
    cycles = {}
    for name, allowed in (("actions", ACTIONS), ("kinds", KINDS), ("tampers", TAMPERS)):
        given = getattr(args, name)
        cycles[name] = given.split(",") if given else None
        if cycles[name] and set(cycles[name]) - set(allowed):
            parser.error(f"--{name}: unknown {sorted(set(cycles[name]) - set(allowed))}")
    chaos = Chaos(args.workdir, args.seed, args.deadline_s, args.per_label)
    results, tampers_done = [], 0
    for index in range(args.steps):
        pick = {name: values[index % len(values)] if values else None for name, values in cycles.items()}
        tamper_kind = None
        if cycles["tampers"] and pick["kinds"] in (None, "tamper"):
            tamper_kind = cycles["tampers"][tampers_done % len(cycles["tampers"])]
        results.append(chaos.step(index, kind=pick["kinds"], action=pick["actions"], tamper_kind=tamper_kind))
        tampers_done += results[-1].kind == "tamper"
        print_step(results[-1])
    results.append(chaos.step(args.steps, kind="night", action="none", final=True))
    print_step(results[-1])
    print(summary(results, args.steps))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1))
    return results


def summary(results: list[StepResult], random_steps: int) -> str:
    failed = [r for r in results if r.failures]
    tampered = [r for r in results if r.kind == "tamper"]
    verdicts = {verdict: sorted(Counter(r.tamper for r in tampered if r.tamper_verdict == verdict).items())
                for verdict in ("refused", "repaired", "unsafe")}
    return (f"chaos: {len(results)} steps ({random_steps} random and a final undisturbed night), {len(failed)} failed; "
            "kinds: " + ", ".join(f"{k} {sum(r.kind == k for r in results)}" for k in KINDS)
            + "; actions: " + ", ".join(f"{a} {sum(r.action == a for r in results)}" for a in ACTIONS)
            + "; tampers " + "; ".join(f"{verdict} {sum(n for _, n in found)} ("
                                       + ", ".join(f"{t} {n}" for t, n in found) + ")"
                                       for verdict, found in verdicts.items())
            + f"; nights {sum(r.new_version for r in results if r.command == 'night')} published, "
            f"compactions {sum(r.new_version for r in results if r.command == 'compact')} published")


def print_step(result: StepResult) -> None:
    verdict = "ok" if not result.failures else "FAIL: " + " | ".join(result.failures)
    what = result.kind if result.kind != "tamper" else f"tamper:{result.tamper}>{result.command}"
    extra = ""
    if result.tamper_verdict:
        extra += f" {result.tamper_verdict}"
    if result.restored_by:
        extra += " then " + "; ".join(result.restored_by)
    if result.reader_outcome:
        extra += f" reader[{result.reader_version}]: {result.reader_outcome}"
    action = result.action if result.disturbed or result.action == "none" else f"({result.action})"  # came too late
    print(f"step {result.index:4d} {what:30s} {action:19s} at {result.delay_s:5.1f}s "
          f"overwrite={int(result.overwrite)} keep={result.keep_builds}"
          + (f" after={result.compact_after}" if result.compact_after is not None else "")
          + f" exit={result.exit_code} "
          f"new={int(result.new_version)} {result.seconds:6.1f}s{extra} {verdict}", flush=True)


if __name__ == "__main__":
    sys.exit(1 if any(r.failures for r in run()) else 0)
