"""pipeline/running/beam_call_cache.py: Beam's state and timer inspection of a DoFn, remembered per DoFn object, gives
Beam's own answers (a stateful DoFn stays stateful), inspects each DoFn once, and forgets a DoFn once it is gone;
options whose views are made once per class share every value with their views, as Beam's do."""

from __future__ import annotations

import gc

import apache_beam as beam
from apache_beam.coders import VarIntCoder
from apache_beam.options.pipeline_options import DebugOptions, PipelineOptions, StandardOptions, TypeOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import userstate

from pipeline.running import beam_call_cache
from pipeline.running.beam_call_cache import ViewsOnce, remember_dofn_specs

TOTAL = userstate.ReadModifyWriteStateSpec("total", VarIntCoder())
TOTAL_STATE = beam.DoFn.StateParam(TOTAL)  # Beam reads state parameters from a method's defaults


class RunningTotalFn(beam.DoFn):
    def process(self, element, total=TOTAL_STATE):
        key, value = element
        running = (total.read() or 0) + value
        total.write(running)
        yield key, running


class PlainFn(beam.DoFn):
    def process(self, element):
        yield element


def test_the_remembered_answers_are_beams_and_each_dofn_is_inspected_once():
    remember_dofn_specs()
    remember_dofn_specs()  # idempotent: one layer of remembering
    stateful, plain = RunningTotalFn(), PlainFn()
    first = userstate.get_dofn_specs(stateful)
    assert {spec.name for spec in first[0]} == {"total"} and first[1] == set()
    assert userstate.get_dofn_specs(stateful) is first, "the second question about one DoFn is not inspected again"
    assert userstate.is_stateful_dofn(stateful) and not userstate.is_stateful_dofn(plain)
    assert userstate.get_dofn_specs(PlainFn()) is not userstate.get_dofn_specs(plain), "per object, not per class"
    key = id(plain)
    assert key in beam_call_cache._remembered
    del plain
    gc.collect()
    assert key not in beam_call_cache._remembered, "a DoFn's entry goes with it"


def test_a_stateful_dofn_still_keeps_its_state_on_the_local_runner():
    remember_dofn_specs()
    with test_pipeline.TestPipeline(runner=FnApiRunner()) as p:
        totals = p | beam.Create([("a", 1), ("a", 2), ("b", 5), ("a", 3)]) | beam.ParDo(RunningTotalFn())
        last = totals | beam.CombinePerKey(max)
        assert_that(last, equal_to([("a", 6), ("b", 5)]))


def test_options_views_made_once_share_their_values_as_beams_do():
    given = PipelineOptions(["--runner", "FnApiRunner", "--experiments", "a"])
    options = ViewsOnce.of(given)
    assert options.view_as(StandardOptions) is options.view_as(StandardOptions), "one view per class"
    assert options.view_as(StandardOptions).runner == "FnApiRunner"
    assert options.view_as(DebugOptions).experiments == ["a"]
    options.view_as(TypeOptions).pipeline_type_check = False  # through a view: seen by the options and a new view
    assert options.get_all_options()["pipeline_type_check"] is False
    assert options.view_as(TypeOptions).pipeline_type_check is False
    copy = beam.Pipeline(runner=FnApiRunner(), options=options).options  # Beam deep-copies a pipeline's options
    assert copy.view_as(TypeOptions).pipeline_type_check is False
    copy.view_as(TypeOptions).pipeline_type_check = True
    assert copy.view_as(TypeOptions) is not options.view_as(TypeOptions)
    assert options.view_as(TypeOptions).pipeline_type_check is False, "a copy's views are its own"
