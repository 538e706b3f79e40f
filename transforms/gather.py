"""One value from a whole, small PCollection (Gather), and per-bundle partial results for one (PerBundleFn).

Why not `beam.CombineGlobally(fn)` or `combiners.ToList()` followed by a Map: each expands into 12 applied
transforms (a keyed GroupByKey, and a default value made by a Create and a side input) and adds 2 stages to the
graph. On Beam's local runner every applied transform costs milliseconds to construct and translate and every
stage tens of milliseconds to run, whatever the data: they set the floor of a small build
(tests/benchmarks/build_overhead.py). Gather is 2 applied transforms (an Impulse and a Map reading the input as
a side input) and 1 stage, and an empty input gives fn([]), as CombineGlobally's default does.

Only for inputs that stay small whatever the dataset (per-label or per-group counts, one partial result per
bundle or per batch): the whole input is one side input, read by one worker. Where the raw elements grow with
the rows, a PerBundleFn folds them into one accumulator per bundle first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue


def in_global_window(value) -> WindowedValue:
    """`value` as an output of finish_bundle, which has no element whose window it could inherit."""
    return WindowedValue(value, MIN_TIMESTAMP, [GlobalWindow()])


def in_global_windows_of(output):
    """An output of finish_bundle, a main one or a TaggedOutput, in the global window."""
    if isinstance(output, beam.pvalue.TaggedOutput):
        return beam.pvalue.TaggedOutput(output.tag, in_global_window(output.value))
    return in_global_window(output)


def _apply(_, fn: Callable, items: list, *args):
    return fn(items, *args)


class Gather(beam.PTransform):
    """PCollection -> a one-element PCollection holding fn(every element of it, as a list, *args), made once the
    whole input exists. The list's order is the runner's: fn must not depend on it."""

    def __init__(self, fn: Callable, *args):
        super().__init__()
        self._fn = fn
        self._args = args

    def expand(self, pcoll):
        return (pcoll.pipeline
                | "Once" >> beam.Impulse()
                | "Apply" >> beam.Map(_apply, self._fn, beam.pvalue.AsList(pcoll), *self._args))


def combine_all(accumulators: list, combine_fn: beam.CombineFn):
    """What `combine_fn` gives for the inputs whose accumulators these are (none: its result for no input)."""
    return combine_fn.extract_output(combine_fn.merge_accumulators([combine_fn.create_accumulator(), *accumulators]))


class PerBundleFn(beam.DoFn):
    """Elements -> one accumulator of `combine_fn` per bundle (none for an empty bundle), for a Gather that
    combines them with combine_all: the side input holds a partial result per bundle instead of every element."""

    def __init__(self, combine_fn: beam.CombineFn):
        self._combine_fn = combine_fn

    def start_bundle(self) -> None:
        self._accumulator = None

    def process(self, element) -> None:
        if self._accumulator is None:
            self._accumulator = self._combine_fn.create_accumulator()
        self._accumulator = self._combine_fn.add_input(self._accumulator, element)

    def finish_bundle(self) -> Iterator:
        if self._accumulator is not None:
            yield in_global_window(self._accumulator)
        self._accumulator = None
