"""How long the end of each bundle waits for Beam's state sampler, on the local runner.

Beam starts a sampling thread for every bundle it runs (apache_beam/runners/worker/statesampler_fast.pyx). The
thread sleeps between samples, from 2 ms up to DEFAULT_SAMPLING_PERIOD_MS (200 ms) as the bundle goes on, and
ending the bundle joins it: the bundle's end waits out the sleep under way. A local build runs its bundles one
after the other, so each of those waits is wall time of the whole build: about 0.1 s over the 18 bundles of a
20,000-image build, most of it after the last shard (the write bundle is the longest, so its sleep is the
longest), and more at 20,000 images than at 5,000 (tests/benchmarks/build_phases.py, `after`).

SAMPLING_PERIOD_MS caps the sleep, hence each wait. The samples only feed Beam's own per-step time counters,
which a local build does not report; a thread that wakes every few milliseconds without the GIL costs nothing
measurable. Imported only by a local build (pipeline/running/runner.py), once Beam is.
"""

from __future__ import annotations

SAMPLING_PERIOD_MS = 5  # bounds the wait at the end of each local bundle


def cap_sampling_period() -> None:
    """Makes every bundle started from now on in this process sample at most every SAMPLING_PERIOD_MS
    (idempotent)."""
    from apache_beam.runners.worker import statesampler

    if getattr(statesampler.StateSampler, "capped_period", False):
        return

    class CappedStateSampler(statesampler.StateSampler):
        capped_period = True

        def __init__(self, prefix, counter_factory, sampling_period_ms=SAMPLING_PERIOD_MS):
            super().__init__(prefix, counter_factory, min(sampling_period_ms, SAMPLING_PERIOD_MS))

    CappedStateSampler.__name__ = CappedStateSampler.__qualname__ = "StateSampler"
    statesampler.StateSampler = CappedStateSampler
