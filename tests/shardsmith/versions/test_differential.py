"""Every version reads the same as a full build of its rows: the differential checker
(tests/benchmarks/differential.py) on a seeded set of histories, each a test. The seeds first listed found defects
on main before 2026-11-29 (an appended night of copies of an image held several times crashed; a night whose only
new rows failed published nothing, so its version's errors.jsonl missed them); 2022 lists a published validation
image again in training, which the night's near-duplicate rule decides apart from a full build (the checker must
tell that from a defect); the rest are a fixed sample. The other half of the set is in test_differential_more.py,
so pytest's two workers share it."""

from __future__ import annotations

import pytest

SEEDS = (37, 18, 39, 36, 2001, 2002, 2003, 2004, 2005, 2006, 2007, 2008, 2009, 2022, 2023)
STEPS = 2  # after the first build


@pytest.mark.parametrize("seed", SEEDS)
def test_every_step_of_a_history_reads_as_a_full_build(seed, history_reads_as_full_builds):
    history_reads_as_full_builds(seed, STEPS)
