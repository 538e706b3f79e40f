"""verify's report: a problem found (`Problem`), one shard's result (`ShardCheck`), the whole run's
(`VerifyReport`: its problems by reason and its verdict line) and a shard's line as `shardsmith verify` prints it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

MAX_PROBLEMS_PER_SHARD = 50  # listed; the rest are counted


@dataclass(frozen=True)
class Problem:
    where: str  # a file name, or "metadata.json"
    reason: str
    detail: str = ""
    record: int | None = None  # 0-based record index inside the shard

    def line(self) -> str:
        at = f" record {self.record}" if self.record is not None else ""
        return f"{self.where}{at}: {self.reason}" + (f" ({self.detail})" if self.detail else "")


@dataclass
class ShardCheck:
    file: str
    split: str
    num_records: int = 0
    num_bytes: int = 0  # size of the file on disk (-1: missing)
    num_decoded: int = 0
    problems: list[Problem] = field(default_factory=list)
    num_problems: int = 0
    label_counts: Counter = field(default_factory=Counter)
    sha256_checked: bool = True  # False: metadata.json records no checksum for it (built before they were)

    def add(self, reason: str, detail: str = "", record: int | None = None) -> None:
        self.num_problems += 1
        if len(self.problems) < MAX_PROBLEMS_PER_SHARD:
            self.problems.append(Problem(self.file, reason, detail, record))


@dataclass
class VerifyReport:
    output_dir: str
    shards: list[ShardCheck]
    problems: list[Problem]  # dataset-level ones; shard ones are in `shards`
    expected_records: int
    elapsed_s: float

    @property
    def all_problems(self) -> list[Problem]:
        return self.problems + [p for s in self.shards for p in s.problems]

    @property
    def num_problems(self) -> int:
        return len(self.problems) + sum(s.num_problems for s in self.shards)

    @property
    def ok(self) -> bool:
        return self.num_problems == 0

    @property
    def num_unhashed(self) -> int:
        """Shards whose file hash metadata.json does not record (builds made before it did)."""
        return sum(1 for s in self.shards if not s.sha256_checked)

    def unhashed_note(self) -> str:
        if not self.num_unhashed:
            return ""
        return (f"note: {self.num_unhashed} shards have no checksum in metadata.json (built before shardsmith "
                "recorded them): each record was checked, but not the file as a whole, so a shard swapped in "
                "from another build with the same counts would pass")

    def by_reason(self) -> Counter:
        counts = Counter(p.reason for p in self.problems)
        for s in self.shards:
            counts.update(p.reason for p in s.problems)
            counts["(more, not listed)"] += s.num_problems - len(s.problems)
        return +counts

    def verdict(self) -> str:
        records = sum(s.num_records for s in self.shards)
        decoded = sum(s.num_decoded for s in self.shards)
        size = sum(max(s.num_bytes, 0) for s in self.shards)
        speed = f"{records / self.elapsed_s:.0f} records/s" if self.elapsed_s > 0 else ""
        counts = (f"{records} of {self.expected_records} records in {len(self.shards)} shards, {size / 1e6:.1f} MB, "
                  f"{decoded} images decoded, in {self.elapsed_s:.1f} s ({speed})")
        if self.ok:
            unhashed = f" but the file hash of {self.num_unhashed} shards (not recorded)" if self.num_unhashed else ""
            return f"shardsmith verify: OK: {counts}; every check holds{unhashed}"
        bad = sum(1 for s in self.shards if s.num_problems)
        reasons = ", ".join(f"{reason} {n}" for reason, n in self.by_reason().most_common(3))
        return (f"shardsmith verify: FAILED: {self.num_problems} problems ({reasons}) in {bad} of "
                f"{len(self.shards)} shards and {len(self.problems)} dataset-level; {counts}")


def shard_line(check: ShardCheck) -> str:
    status = "ok  " if not check.num_problems else "FAIL"
    size = f"{check.num_bytes / 1e6:.2f} MB" if check.num_bytes >= 0 else "missing"
    line = f"  {status}  {check.file:<44} {check.num_records:>7} records  {size:>9}  {check.num_decoded:>7} decoded"
    if check.num_problems:
        line += f"  {check.num_problems} problem(s)"
    return line
