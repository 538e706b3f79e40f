"""What Beam asks again and again while it constructs and runs a local build's graph, answered once. Each answer
depends only on an object that does not change once made, so remembering it changes no answer; measured with
tests/benchmarks/build_overhead.py on a 124-image build whose graph holds 94 applied transforms and 41 ParDos:

- "does this DoFn use state or timers?" (`apache_beam.transforms.userstate.get_dofn_specs`): it inspects the
  signature of every method of the DoFn (29 on a plain one, about 2 ms), and Beam 2.77 asks it 5 times while
  constructing and translating each ParDo and twice more when the local runner sets it up: 320 calls, 0.3-0.6 s.
  Remembered per DoFn object (remember_dofn_specs); entries go with their DoFn.
- "these options, seen as TypeOptions (StandardOptions, ...)" (`PipelineOptions.view_as`): each call builds an
  argparse parser for the class and parses the flags again (about 1 ms), once or twice per applied transform:
  250 calls, 0.15-0.3 s. Remembered per options object and class (ViewsOnce); a view shares its values with the
  options, so a remembered view sees every change.

Imported only by a local build (pipeline/running/runner.py), once Beam is.
"""

from __future__ import annotations

import weakref

from apache_beam.options.pipeline_options import PipelineOptions

_remembered: dict[int, tuple[weakref.ref, tuple]] = {}


def remember_dofn_specs() -> None:
    """Makes Beam's get_dofn_specs remember its answer per DoFn object, for the rest of this process (idempotent)."""
    from apache_beam.transforms import userstate

    if getattr(userstate.get_dofn_specs, "remembers", False):
        return
    inspect = userstate.get_dofn_specs

    def get_dofn_specs(dofn):
        key = id(dofn)
        entry = _remembered.get(key)
        if entry is not None and entry[0]() is dofn:
            return entry[1]
        specs = inspect(dofn)
        try:
            reference = weakref.ref(dofn, lambda gone, key=key: _forget(key, gone))
        except TypeError:  # an object that cannot be referenced weakly is inspected every time, as before
            return specs
        _remembered[key] = (reference, specs)
        return specs

    get_dofn_specs.remembers = True
    get_dofn_specs.__doc__ = inspect.__doc__
    userstate.get_dofn_specs = get_dofn_specs


def _forget(key: int, gone: weakref.ref) -> None:
    entry = _remembered.get(key)
    if entry is not None and entry[0] is gone:  # not a later DoFn that was given the same id
        del _remembered[key]


class ViewsOnce(PipelineOptions):
    """PipelineOptions whose view_as(cls) is made once per class (see the module's docstring)."""

    @classmethod
    def of(cls, options: PipelineOptions) -> ViewsOnce:
        """The same flags and values as `options`, as Beam's own copy of a pipeline's options holds them (Beam
        has no public way to copy options into another class: its flags and values are its private fields)."""
        return cls(options._flags, **options._all_options)

    def view_as(self, cls):
        views = self.__dict__.get("_views")
        if views is None:
            views = {}
            object.__setattr__(self, "_views", views)  # PipelineOptions' own __setattr__ takes option names only
        view = views.get(cls)
        if view is None:
            view = views[cls] = super().view_as(cls)
        return view

    def __getstate__(self):
        # A copy (Beam deep-copies a pipeline's options) makes views of its own values.
        return {name: value for name, value in super().__getstate__().items() if name != "_views"}
