"""Fixtures of the versions' tests: the differential checker's seeded histories."""

from __future__ import annotations

import pytest


@pytest.fixture
def history_reads_as_full_builds(differential_checker, tmp_path):
    """history_reads_as_full_builds(seed, steps): runs the checker's history `seed` and asserts that every one of
    its steps ran and read as a full build of its rows."""

    def check(seed: int, steps: int) -> None:
        result = differential_checker.run_history(str(tmp_path), seed, steps)
        assert result.steps == steps + 1
        assert result.failures == []

    return check


@pytest.fixture(scope="session")
def differential_checker():
    """tests/benchmarks/differential.py as a module: `run_history(workdir, seed, steps)` checks one history."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).parents[2] / "benchmarks" / "differential.py"
    spec = importlib.util.spec_from_file_location("differential", path)
    checker = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = checker  # its dataclasses look their module up
    spec.loader.exec_module(checker)
    return checker
