"""The chaos benchmark's short mode (tests/benchmarks/chaos.py): into one folder, two nights (`--incremental`, the
manifest changing between them, with broken rows), a compaction, a night or compaction after a row list was
tampered with, then one command killed by each kind of disturbance, with the checks an unattended schedule
relies on after every step (no hang, the published version loads, verifies and holds exactly the manifest's good
rows and its broken rows as errors, label ids keep their meaning, nothing outside builds/, inputs untouched, a
tampered step refuses in one line or publishes a correct version, and the next command needs no person)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

CHAOS = Path(__file__).parents[2] / "benchmarks" / "chaos.py"


def test_each_disturbance_and_tamper_leaves_a_folder_the_next_night_can_use(tmp_path):
    spec = importlib.util.spec_from_file_location("chaos", CHAOS)
    chaos = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = chaos  # its dataclasses look their module up
    spec.loader.exec_module(chaos)
    kinds = "night,night,compact,tamper,night,build,night,build"
    actions = "none,none,none,none,kill9_child,sigstop_takeover,kill9_launcher,sigint_group"
    results = chaos.run(["--steps", "8", "--seed", "8", "--per_label", "16", "--kinds", kinds, "--actions", actions,
                         "--tampers", "drop_row_line", "--workdir", str(tmp_path / "chaos"), "--deadline_s", "240"])
    assert [r.kind for r in results] == kinds.split(",") + ["night"]
    assert [r.action for r in results] == actions.split(",") + ["none"]
    assert [r.failures for r in results] == [[] for _ in results]
    # Undisturbed, the first steps are the same every run: two nights publish (seed 8: the second adds records; a
    # night whose new rows all fail adds no generation), the compaction publishes their generations as one, and
    # the tampered row list is refused in one line or makes a correct version.
    assert [r.new_version for r in results[:3]] == [True, True, True]
    assert results[2].command == "compact"
    assert results[3].tamper == "drop_row_line" and results[3].tamper_verdict in ("refused", "repaired")
    assert results[-1].exit_code == 0 and results[-1].published
