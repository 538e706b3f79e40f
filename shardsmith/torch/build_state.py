"""The build a dataset's saved state was taken reading (`build_identity`), and the check that a state loaded is
of this build and split (`check_build`).

Guarantee: a state of another build, split or record count, or one that is not a shardsmith.torch state, is
refused with a one-line ValueError (for another build, naming the `version=` that reads the saved one while it is
kept), so a sampler's or a stream's positions never pick other records than those they were saved on.
"""

from __future__ import annotations

from shardsmith.format.naming import BUILD_ID
from shardsmith.printable import shown
from shardsmith.read.record_sequence import Records
from shardsmith.read.version_files import resume_advice


def build_identity(records: Records, build_id: str | None) -> dict:
    return {"build_id": build_id, "split": records.split, "num_records": len(records)}


def whole_number(state: dict, key: str, least: int, kind: str) -> None:
    """ValueError, one line, unless `state[key]` is an int (not a bool) of at least `least`."""
    value = state[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"not a {kind} state: its {key!r} is {shown(repr(value))[:80]}, a whole number "
                         f"from {least} up is expected")


def check_build(records: Records, build_id: str | None, state: dict) -> None:
    """ValueError, one line, unless `state` was saved reading this build's split."""
    if not isinstance(state, dict):
        raise ValueError(f"not a shardsmith.torch dataset state: a {type(state).__name__}, not a dict")
    missing = [key for key in ("build_id", "split", "num_records") if key not in state]
    if missing:
        raise ValueError(f"not a shardsmith.torch dataset state: it has no {missing[0]!r}")
    saved, here = state["build_id"], build_id
    if saved is not None and not (isinstance(saved, str) and BUILD_ID.fullmatch(saved)):
        raise ValueError(f"not a shardsmith.torch dataset state: its 'build_id' {shown(repr(saved))[:80]} is not a "
                         "build id (like 20261124T211052Z-44b3a31b)")
    if not isinstance(state["split"], str):
        raise ValueError(f"not a shardsmith.torch dataset state: its 'split' is {shown(repr(state['split']))[:80]}")
    whole_number(state, "num_records", 0, "shardsmith.torch dataset")
    if saved != here:
        how = resume_advice(records.output_dir, saved) if saved else "it cannot be reopened by version"
        raise ValueError(f"the state was saved reading build {saved} of {records.output_dir}, this dataset reads "
                         f"build {here}: {how}, or start the epoch over without the state")
    if (state["split"], state["num_records"]) != (records.split, len(records)):
        raise ValueError(f"the state is of split {state['split']!r} ({state['num_records']} records), this "
                         f"dataset reads {records.split!r} ({len(records)} records) of build {here}")
