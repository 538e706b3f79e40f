"""pipeline/running/bundle_sampler.py: a local build's bundles are sampled at the capped period (so each bundle's
end waits at most that long for the sampling thread), and a bundle still runs and counts as before."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.worker import statesampler
from apache_beam.testing.util import assert_that, equal_to

from pipeline.running.bundle_sampler import SAMPLING_PERIOD_MS, cap_sampling_period
from pipeline.running.runner import make_pipeline


class SamplingPeriodFn(beam.DoFn):
    """Emits the sampling period of the state sampler that tracks the bundle running it."""

    def process(self, element):
        yield element, statesampler.get_current_tracker().sampling_period_ms


def test_a_local_builds_bundles_are_sampled_at_the_capped_period():
    with make_pipeline(PipelineOptions(["--runner", "DirectRunner"])) as p:
        periods = p | beam.Create(["a", "b"]) | beam.ParDo(SamplingPeriodFn())
        assert_that(periods, equal_to([("a", SAMPLING_PERIOD_MS), ("b", SAMPLING_PERIOD_MS)]))
    assert SAMPLING_PERIOD_MS < statesampler.DEFAULT_SAMPLING_PERIOD_MS


def test_capping_twice_is_one_cap_and_a_longer_period_asked_for_is_capped():
    cap_sampling_period()
    capped = statesampler.StateSampler
    cap_sampling_period()
    assert statesampler.StateSampler is capped, "idempotent: one layer"
    sampler = statesampler.StateSampler("stage", beam.utils.counters.CounterFactory(), sampling_period_ms=1000)
    assert sampler.sampling_period_ms == SAMPLING_PERIOD_MS
