"""Beam's question "does this DoFn use state or timers?", answered once per DoFn object instead of about 7 times.

`apache_beam.transforms.userstate.get_dofn_specs` inspects the signature of every method of a DoFn (29 on a plain
one, about 2 ms) and Beam 2.77 calls it 5 times while constructing and translating each ParDo and twice more when
the local runner sets the ParDo up: 320 calls, 0.3-0.6 s, of a 124-image build whose graph holds 41 ParDos
(tests/benchmarks/build_overhead.py). The answer depends only on the DoFn's methods, which do not change once the
DoFn exists, so remembering it per object changes no answer. Installed by pipeline/running/runner.py for local
builds; entries go with their DoFn.
"""

from __future__ import annotations

import weakref

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
