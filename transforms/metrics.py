"""The build's Beam metrics: what each stage counts, under one namespace, so that a run can be watched where its
runner shows metrics (Dataflow's job page, "Custom counters"; a local run's PipelineResult.metrics()).

Every name is defined here once. Each metric is counted by the DoFn that does the work, never by re-reading an
output, so the runner's committed values count each element once however often a bundle is retried. The
values match metadata.json once a build is published (docs/metrics.md); a local build logs them in one line:

  rows_read                 manifest data rows read (ReadManifest): rows parsed plus lines rejected there;
                            metadata.json's num_input_rows
  records_written_<split>   records written into the split's shards (WriteShards); splits[split].num_examples
  bytes_written_<split>     bytes of the split's shard files as written (WriteShards); splits[split].num_bytes
  errors_<stage>            manifest lines rejected by a stage (ErrorRow.stage: manifest, lookup, duplicate, label,
                            load), one per line as errors.jsonl lists them
  image_bytes               distribution: the source bytes of each written image (count: num_examples)
  images_read               images read by the shard writers: records written plus images rejected as read
  rows_carried, rows_new,   --incremental: manifest lines whose records the published version holds (their
  rows_removed              images are not read; SplitCarriedRows), lines it holds no record for (records or
                            errors, manifest lines that did not parse included; counted by the report, as
                            rows_read less rows_carried), and lines of its records the manifest no longer lists
                            (SplitCarriedRows); metadata.json's incremental entry: num_carried_rows,
                            num_added_rows, num_removed_rows
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import apache_beam as beam
from apache_beam.metrics.metric import Metrics, MetricsFilter

from shardsmith.rows import ErrorRow, ShardResult
from transforms import ERRORS

NAMESPACE = "shardsmith"
ROWS_READ = "rows_read"
IMAGE_BYTES = "image_bytes"
IMAGES_READ = "images_read"
ROWS_CARRIED, ROWS_NEW, ROWS_REMOVED = "rows_carried", "rows_new", "rows_removed"
RECORDS_WRITTEN = "records_written_"  # + split
BYTES_WRITTEN = "bytes_written_"  # + split
ERRORS_OF = "errors_"  # + stage


def records_written(split: str) -> str:
    return RECORDS_WRITTEN + split


def bytes_written(split: str) -> str:
    return BYTES_WRITTEN + split


def errors_of(stage: str) -> str:
    return ERRORS_OF + stage


def count(name: str, n: int = 1) -> None:
    Metrics.counter(NAMESPACE, name).inc(n)


def rejected(error: ErrorRow) -> beam.pvalue.TaggedOutput:
    """`error` as its stage's `errors` output, counted under errors_<stage>: one per manifest line, as
    errors.jsonl lists it (a detection image's error stands for each of its box lines)."""
    count(errors_of(error.stage), len(error.per_line()))
    return beam.pvalue.TaggedOutput(ERRORS, error)


def count_written(result: ShardResult, image_sizes: Iterable[int], num_rejected: int = 0) -> None:
    """One finished shard: its records and bytes under its split, each written image's source size, and the
    images read for it (its records and the `num_rejected` images rejected as read)."""
    count(IMAGES_READ, result.num_examples + num_rejected)
    count(records_written(result.split), result.num_examples)
    count(bytes_written(result.split), result.num_bytes)
    distribution = Metrics.distribution(NAMESPACE, IMAGE_BYTES)
    for size in image_sizes:
        distribution.update(size)


@dataclass(frozen=True)
class SizeDistribution:
    count: int
    sum: int
    min: int
    max: int

    @property
    def mean(self) -> float:
        return self.sum / self.count if self.count else 0.0


@dataclass(frozen=True)
class BuildMetrics:
    """The committed shardsmith metrics of a finished run, summed over the steps that count them."""

    counters: dict[str, int] = field(default_factory=dict)
    image_bytes: SizeDistribution | None = None

    def get(self, name: str) -> int:
        return self.counters.get(name, 0)

    def by_prefix(self, prefix: str) -> dict[str, int]:
        """e.g. by_prefix(ERRORS_OF) -> {stage: lines}."""
        return {name[len(prefix):]: n for name, n in sorted(self.counters.items()) if name.startswith(prefix)}

    def describe(self) -> str:
        """One line: every counter, then the image sizes."""
        parts = [f"{name} {n}" for name, n in self.counters.items()]
        sizes = self.image_bytes
        if sizes is not None:
            parts.append(f"{IMAGE_BYTES} count {sizes.count} sum {sizes.sum} min {sizes.min} max {sizes.max} "
                         f"mean {sizes.mean:.0f}")
        return ", ".join(parts) or "none"


def query(result) -> BuildMetrics:
    """The committed shardsmith metrics of a finished PipelineResult (`pipeline.result` after a `with` block)."""
    found = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))
    counters: dict[str, int] = {}
    for metric in found["counters"]:
        if metric.committed is not None:
            name = metric.key.metric.name
            counters[name] = counters.get(name, 0) + metric.committed
    image_bytes = None
    for metric in found["distributions"]:
        data = metric.committed
        if metric.key.metric.name != IMAGE_BYTES or data is None or not data.count:
            continue
        if image_bytes is None:
            image_bytes = SizeDistribution(data.count, data.sum, data.min, data.max)
        else:
            image_bytes = SizeDistribution(image_bytes.count + data.count, image_bytes.sum + data.sum,
                                           min(image_bytes.min, data.min), max(image_bytes.max, data.max))
    return BuildMetrics(dict(sorted(counters.items())), image_bytes)
