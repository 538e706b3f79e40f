"""The differential checker: every version of a scheduled folder reads the same as a full build of its rows.

Each history (tests/benchmarks/differential_history.py) starts a folder with `build --incremental` and then runs
`--steps` steps on it, each drawn from a seed: the manifest and images change as a real export's do (rows appended,
removed, edited, reordered; the manifest rewritten with other line ends, quoting or column order; exact copies of
an image under 1 to 6 names, hard links among them, in any split; near copies; broken files, fixed later; new
labels; a URI listed twice), then one command runs: a night (`build --incremental`, sometimes with a
`--label_file`), `compact`, a `tag` or `untag` then a night, or a night with nothing changed; each with
`--keep_builds` 1 to 3 (and `--keep_days 0`). A history draws its options once: `--on_duplicate keep|drop`,
`--near_duplicates off|report|drop`, CSV or JSON Lines.

After every step the published version is read (differential_reading.py) and compared with a from-scratch full
build of the same manifest, with the version's labels.txt as `--label_file` (so label ids are the same): each
split's records as a multiset of their bytes, labels.txt, errors.jsonl's rows, the duplicate and near-duplicate
summaries, the counts in metadata.json; `shardsmith verify` must pass; every command must exit 0; and every kept
version (tagged or within --keep_builds) must still read the records it had when it was published.

    python tests/benchmarks/differential.py --histories 500 --steps 8 --seed 1 --jobs 2

Prints a line per history that differs (and a summary); exits 1 when any did. `--json FILE` writes every history.
The suite runs a seeded set (tests/shardsmith/versions/test_differential.py).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from multiprocessing import get_context
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from differential_history import History, Step  # noqa: E402
from differential_reading import Reading, differences, kept_published, read_version  # noqa: E402

# Each step's retention: by --keep_builds alone, so that versions retire within a history of seconds
RETENTION = ("--keep_days", "0", "--keep_builds")


@dataclass
class HistoryResult:
    seed: int
    steps: int = 0
    published: int = 0  # steps that published a new version
    commands: dict[str, int] = field(default_factory=dict)
    options: list[str] = field(default_factory=list)
    kept_published: int = 0  # rows of near-duplicate groups a night decided by its own rule (differential_reading)
    failures: list[str] = field(default_factory=list)  # "step N (what it did): the difference"
    seconds: float = 0.0


def shardsmith(*args: str) -> tuple[int, str]:
    """Runs the CLI in this process; (exit code, what it printed)."""
    from pipeline import cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = cli.main([str(a) for a in args])
    return code, out.getvalue()


class Checker:
    """Runs one history into `workdir` and checks every step."""

    def __init__(self, workdir: Path, seed: int) -> None:
        shutil.rmtree(workdir, ignore_errors=True)
        self.workdir = workdir
        self.history = History(workdir / "data", seed)
        self.out = workdir / "out"
        self.result = HistoryResult(seed, options=self.history.options())
        self.kept: dict[str, str] = {}  # version -> record digest when it was published
        self.full_builds: dict[str, Reading] = {}  # inputs' fingerprint -> the full build's reading

    def run(self, steps: int) -> HistoryResult:
        started = time.monotonic()
        self._check(Step(0, ["first build"], "night", 2), self._night(Step(0, [], "night", 2)))
        for _ in range(steps):
            if self.result.failures:
                break
            step = self.history.step(self._kept_versions())
            self._check(step, self._run(step))
        self.result.seconds = round(time.monotonic() - started, 1)
        return self.result

    def _kept_versions(self) -> list[str]:
        builds = self.out / "builds"
        return sorted(p.parent.name for p in builds.glob("*/metadata.json")) if builds.exists() else []

    def _published(self) -> dict:
        return json.loads((self.out / "metadata.json").read_text())

    def _run(self, step: Step) -> tuple[int, str]:
        if step.command == "compact":
            return shardsmith("compact", self.out, *RETENTION, step.keep_builds)
        if step.tag is not None:
            verb, name = step.tag
            target = [] if verb == "untag" else [self.history.rng.choice(self._kept_versions())]
            code, said = shardsmith(verb, self.out, *target, name)
            if code != 0:
                return code, said
        return self._night(step)

    def _night(self, step: Step) -> tuple[int, str]:
        flags = ["build", "--incremental", "--manifest", self.history.manifest.path, "--output_dir", self.out,
                 *self.history.options(), *RETENTION, str(step.keep_builds)]
        if step.max_removed_fraction is not None:
            flags += ["--max_removed_fraction", str(step.max_removed_fraction)]
        if step.command == "night_label_file":
            labels = (self.out / "builds" / self._published()["build_id"] / "labels.txt").read_text().split("\n")
            flags += ["--label_file", self.history.label_file([label for label in labels if label])]
        return shardsmith(*flags)

    def _full_build(self, labels_txt: str) -> Reading | str:
        """The full build of the manifest as it is now with the version's label ids (cached: a compaction, a tag
        and a night that changed nothing leave the inputs as they were)."""
        manifest = self.history.manifest.path.read_bytes()
        fingerprint = json.dumps([manifest.hex(), sorted(self.history.images.broken), labels_txt])
        if fingerprint in self.full_builds:
            return self.full_builds[fingerprint]
        full = self.workdir / "full"
        shutil.rmtree(full, ignore_errors=True)
        label_file = self.workdir / "full-labels.txt"
        label_file.write_text(labels_txt, encoding="utf-8")
        code, said = shardsmith("build", "--manifest", self.history.manifest.path, "--output_dir", full,
                                *self.history.options(), "--label_file", label_file)
        if code != 0:
            return f"the full build exited {code}: {_last_lines(said)}"
        self.full_builds = {fingerprint: read_version(full)}
        return self.full_builds[fingerprint]

    def _check(self, step: Step, ran: tuple[int, str]) -> None:
        code, said = ran
        what = step.describe()
        self.result.steps += 1
        self.result.commands[step.command] = self.result.commands.get(step.command, 0) + 1
        if code != 0 and not _refused_compaction(step, said):
            self._fail(what, f"exited {code}: {_last_lines(said)}")
            return
        try:
            version = read_version(self.out)
        except Exception as error:  # noqa: BLE001 - any failure to read is the finding
            self._fail(what, f"the published version cannot be read: {type(error).__name__}: {error}")
            return
        built_now = version.version not in self.kept
        if built_now:
            self.result.published += int(step.number > 0)
            self.kept[version.version] = version.record_digest()
        full = self._full_build(version.labels_txt)
        if isinstance(full, str):
            self._fail(what, full)
            return
        self.result.kept_published += len(kept_published(version, full))
        # A compaction's errors.jsonl is the version's it compacted: its lines are of that version's manifest.
        for difference in differences(version, full, built_now and step.command != "compact"):
            self._fail(what, difference)
        verified, said = shardsmith("verify", self.out)
        if verified != 0:
            self._fail(what, f"verify exited {verified}: {_last_lines(said)}")
        self._check_kept(what)

    def _check_kept(self, what: str) -> None:
        """Every kept version reads as it did when published; a tagged one is kept."""
        kept = set(self._kept_versions())
        tags_file = self.out / "tags.json"
        tagged = json.loads(tags_file.read_text()) if tags_file.exists() else {}
        for name in self.history.tags:
            if name not in json.dumps(tagged):
                self._fail(what, f"tag {name} is not in tags.json")
        for version in sorted(kept & set(self.kept)):
            try:
                digest = read_version(self.out, version).record_digest()
            except Exception as error:  # noqa: BLE001
                self._fail(what, f"kept version {version} cannot be read: {type(error).__name__}: {error}")
                continue
            if digest != self.kept[version]:
                self._fail(what, f"kept version {version} reads other records than when it was published")

    def _fail(self, what: str, difference: str) -> None:
        self.result.failures.append(f"{what}: {difference}")


def _refused_compaction(step: Step, said: str) -> bool:
    """`compact` of a version in one generation refuses (nothing to compact): not a finding."""
    return step.command == "compact" and "one generation" in said


def _last_lines(text: str, n: int = 3) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return " | ".join(lines[-n:])


def run_history(workdir: str, seed: int, steps: int) -> HistoryResult:
    folder = Path(workdir) / f"h{seed}"
    result = Checker(folder, seed).run(steps)
    if not result.failures:
        shutil.rmtree(folder, ignore_errors=True)
    return result


def _quiet_worker() -> None:
    """A worker process prints nothing of the builds' logs (the results say what happened)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"


def run(argv: list[str] | None = None, report: Callable[[HistoryResult], None] | None = None) -> list[HistoryResult]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--histories", type=int, default=20)
    parser.add_argument("--steps", type=int, default=8, help="steps after the first build")
    parser.add_argument("--seed", type=int, default=1, help="the first history's seed; the others follow it")
    parser.add_argument("--jobs", type=int, default=1, help="histories run at once (processes)")
    parser.add_argument("--workdir", default="/tmp/shardsmith-differential")
    parser.add_argument("--json", help="write every history's result here")
    args = parser.parse_args(argv)
    seeds = range(args.seed, args.seed + args.histories)
    results: list[HistoryResult] = []
    if args.jobs <= 1:
        for seed in seeds:
            results.append(run_history(args.workdir, seed, args.steps))
            if report:
                report(results[-1])
    else:
        with ProcessPoolExecutor(args.jobs, mp_context=get_context("spawn"), initializer=_quiet_worker) as pool:
            for result in pool.map(run_history, [args.workdir] * len(seeds), seeds, [args.steps] * len(seeds)):
                results.append(result)
                if report:
                    report(result)
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in results], indent=1))
    return results


def _print(result: HistoryResult) -> None:
    state = "DIFFERS" if result.failures else "same"
    print(f"history {result.seed}: {result.steps} steps, {result.published} published, {state} "
          f"({result.seconds} s; {' '.join(result.options[-4:])})", flush=True)
    for failure in result.failures:
        print(f"  {failure}", flush=True)


def main() -> int:
    results = run(sys.argv[1:], _print)
    differing = [r for r in results if r.failures]
    steps = sum(r.steps for r in results)
    commands: dict[str, int] = {}
    for r in results:
        for command, n in r.commands.items():
            commands[command] = commands.get(command, 0) + n
    print(f"{len(results)} histories, {steps} steps ({', '.join(f'{k} {v}' for k, v in sorted(commands.items()))}), "
          f"{sum(r.published for r in results)} versions published, "
          f"{sum(r.kept_published for r in results)} rows in near-duplicate groups decided by the night rule; "
          f"{len(differing)} histories differ"
          + (f": seeds {[r.seed for r in differing]}" if differing else ""))
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
