"""Runner choice. The local default is Beam's FnApiRunner, named directly: plain `DirectRunner` first tries the
Prism runner, which downloads a binary from the internet, so offline it fails before falling back."""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.running.runner_names import is_local_runner


def is_local(options: PipelineOptions) -> bool:
    """Beam's local runner by any of its names, short or fully qualified (pipeline/running/runner_names.py)."""
    from apache_beam.options.pipeline_options import StandardOptions

    return is_local_runner(options.view_as(StandardOptions).runner)


def leaves_job_running(options: PipelineOptions) -> bool:
    """Whether running the pipeline only hands the job over and returns before it finishes: Beam's
    --no_wait_until_finish, or --template_location, which Dataflow's Flex Template launcher passes (the job graph
    is written there and Dataflow submits it once the launcher's program has exited). The launcher then leaves
    the folder's lock to the job, whose publish step releases it, and reads no result."""
    from apache_beam.options.pipeline_options import GoogleCloudOptions, StandardOptions

    return bool(options.view_as(StandardOptions).no_wait_until_finish
                or options.view_as(GoogleCloudOptions).template_location)


def runs_in_one_process(options: PipelineOptions) -> bool:
    """Whether every step runs in this process: the local runner's in_memory mode (the default, measured fastest
    here: see README, Performance). Its other modes and remote runners spread elements over their own workers."""
    from apache_beam.options.pipeline_options import DirectOptions

    return is_local(options) and options.view_as(DirectOptions).direct_running_mode == "in_memory"


def writer_processes(options: PipelineOptions, requested: int) -> int:
    """Shard writer processes for this run: only a run in one process (`runs_in_one_process`) needs them. By
    default one per core (never more than the build has shards: write_shards.py). One more than cores kept both
    cores busier while the last shards were written, but cost more CPU and memory than it saved
    (docs/performance.md, "Settings that matter")."""
    if not runs_in_one_process(options):
        return 0
    if requested >= 0:
        return requested
    return len(os.sched_getaffinity(0))


def make_pipeline(options: PipelineOptions) -> beam.Pipeline:
    """The pipeline for `options`' runner. On the local runner, without Beam's construction-time type checks
    (--pipeline_type_check), which compare type hints at every applied transform (0.2-0.35 s of each small build,
    tests/benchmarks/build_overhead.py), and with what Beam asks again and again (a DoFn's state and timers, an
    options view) answered once (pipeline/running/beam_call_cache.py). Without the checks, a few PCollections whose
    type Beam inferred (an int from len, a random key) cross stages in Beam's default coder instead of a typed
    one: the same values, the same bytes written. A remote runner's graph is still checked (the tests submit one
    to a Dataflow stand-in).

    Also without the local runner's side-input cache: the cache sizes each value it holds with objsize, which
    walks the globals of every loaded module, 20 times a build; with TensorFlow loaded that cost about 0.1 s of a
    0.9 s demo build (tests/benchmarks/build_overhead.py --with_tensorflow), and our side inputs (a vocabulary, a
    plan, label counts) decode in microseconds when read again. Beam's embedded worker reads the size from a
    module constant; 0 turns the cache off, as it is in a default SDK harness.

    And with each bundle's end waiting at most a few milliseconds for Beam's state sampler, not up to 0.2 s
    (pipeline/running/bundle_sampler.py)."""
    import apache_beam as beam

    if is_local(options):
        from apache_beam.options.pipeline_options import TypeOptions
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner, worker_handlers

        from pipeline.running.beam_call_cache import ViewsOnce, remember_dofn_specs
        from pipeline.running.bundle_sampler import cap_sampling_period

        options = ViewsOnce.of(options)
        options.view_as(TypeOptions).pipeline_type_check = False
        worker_handlers.STATE_CACHE_SIZE_MB = 0
        remember_dofn_specs()
        cap_sampling_period()
        return beam.Pipeline(runner=FnApiRunner(), options=options)
    # A remote runner's INFO lines carry the job id ("Created job with id: [...]", which Airflow's Beam operator
    # reads) and the console URL. A local build earlier in the same process (a notebook, a test session, an
    # Airflow PythonOperator) silences Beam's logger; undo that here.
    logging.getLogger("apache_beam").setLevel(logging.NOTSET)
    return beam.Pipeline(options=options)
