"""The chaos benchmark's short mode (tests/benchmarks/chaos.py): one build killed by each kind of disturbance
into one folder, with the checks an unattended schedule relies on after every step (no hang, the published
dataset loads and verifies, nothing outside builds/, inputs untouched, the next build needs no person)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

CHAOS = Path(__file__).parent / "benchmarks" / "chaos.py"


def test_each_disturbance_leaves_a_folder_the_next_build_can_use(tmp_path):
    spec = importlib.util.spec_from_file_location("chaos", CHAOS)
    chaos = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = chaos  # its dataclasses look their module up
    spec.loader.exec_module(chaos)
    actions = "none,kill9_launcher,kill9_child,sigstop_takeover,sigint_group"
    results = chaos.run(["--steps", "5", "--seed", "7", "--per_label", "8", "--actions", actions,
                         "--workdir", str(tmp_path / "chaos"), "--deadline_s", "240"])
    assert [r.action for r in results] == actions.split(",") + ["none"]
    assert [r.failures for r in results] == [[] for _ in results]
    assert results[-1].exit_code == 0 and results[-1].published
