"""transforms/gather.py on the local runner: Gather gives what CombineGlobally gives (an empty input included, where
CombineGlobally's default applies), and per-bundle accumulators combined by combine_all give the CombineFn's result,
in 2 applied transforms where CombineGlobally takes 12."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to

from transforms.gather import Gather, PerBundleFn, combine_all


def _applied(pipeline: beam.Pipeline, label: str) -> int:
    """Applied transforms (a composite and its parts) under the top-level transform `label`."""
    top = next(part for part in pipeline.transforms_stack[0].parts if part.full_label == label)
    count, stack = 0, [top]
    while stack:
        node = stack.pop()
        count += 1
        stack.extend(node.parts)
    return count


@pytest.mark.parametrize("numbers", [[], [3], list(range(1, 2001))])
def test_gather_gives_what_combine_globally_gives(numbers):
    with test_pipeline.TestPipeline(runner=FnApiRunner()) as p:
        given = p | beam.Create(numbers, reshuffle=False)
        gathered = given | "Gathered" >> Gather(sum)
        combined = given | "Combined" >> beam.CombineGlobally(sum)
        counted = (given
                   | "CountPerBundle" >> beam.ParDo(PerBundleFn(beam.combiners.CountCombineFn()))
                   | "Counted" >> Gather(combine_all, beam.combiners.CountCombineFn()))
        assert_that(gathered, equal_to([sum(numbers)]), label="Gather")
        assert_that(combined, equal_to([sum(numbers)]), label="CombineGlobally")
        assert_that(counted, equal_to([len(numbers)]), label="PerBundle")
        assert (_applied(p, "Gathered"), _applied(p, "Combined")) == (3, 13)


def test_gather_passes_its_arguments_and_the_whole_input():
    with test_pipeline.TestPipeline(runner=FnApiRunner()) as p:
        words = p | beam.Create(["b", "a", "c", "a"])
        joined = words | Gather(lambda items, separator: separator.join(sorted(items)), "+")
        assert_that(joined, equal_to(["a+a+b+c"]))
