"""Labels that look the same but are different strings: the same word with a composed é (U+00E9) and with e and
a combining accent (U+0301), which a folder copied from macOS (decomposed file names) into a Linux export makes
of every accented class; or `Cat` beside `cat` in a manifest whose other labels are all one case. Each becomes a
class of its own, silently, unless it is reported: a build lists them in metadata.json (`look_alike_labels`) and
its summary, and `--normalize_labels nfc` merges the first kind.

Guarantee: `look_alike_groups` depends only on the labels and their record counts (never on their order), and
each label is in at most one group: Unicode groups first, then case groups of the labels left.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from dataclasses import replace

from shardsmith.format.metadata_schema import LookAlikeLabels, Metadata

NORMALIZATIONS = ("none", "nfc")  # --normalize_labels
MAX_GROUPS_LISTED = 20  # groups written to metadata.json and shown, in label order


def normalized_label(label: str, normalization: str) -> str:
    """`label` as --normalize_labels `normalization` makes it."""
    return unicodedata.normalize("NFC", label) if normalization == "nfc" else label


def _one_case(labels: list[str]) -> bool:
    return all(label == label.lower() for label in labels) or all(label == label.upper() for label in labels)


def look_alike_groups(records: Mapping[str, int]) -> list[LookAlikeLabels]:
    """Groups of labels that look alike (see the module), from the records of each label (every label listed,
    with 0 where it has none), in the order of their first label."""
    by_form: dict[str, list[str]] = {}
    for label in sorted(records):
        by_form.setdefault(unicodedata.normalize("NFC", label), []).append(label)
    groups = [LookAlikeLabels(kind="unicode", labels=same, records=[records[label] for label in same])
              for same in by_form.values() if len(same) > 1]
    grouped = {label for group in groups for label in group.labels}
    by_case: dict[str, list[str]] = {}
    for label in sorted(set(records) - grouped):
        by_case.setdefault(unicodedata.normalize("NFC", label).casefold(), []).append(label)
    others = [same[0] for same in by_case.values() if len(same) == 1]
    if _one_case(others):
        groups += [LookAlikeLabels(kind="case", labels=same, records=[records[label] for label in same])
                   for same in by_case.values() if len(same) > 1]
    return sorted(groups, key=lambda group: group.labels)


def with_look_alike_labels(metadata: Metadata) -> Metadata:
    """`metadata` with its `look_alike_labels` (the version's labels, each with its records in every split); the
    entry stays out of metadata.json when no labels look alike."""
    records = dict.fromkeys(metadata.labels, 0)
    for split in metadata.splits.values():
        for label, n in (split.label_counts or {}).items():
            records[label] = records.get(label, 0) + n
    groups = look_alike_groups(records)
    return replace(metadata, look_alike_labels=groups[:MAX_GROUPS_LISTED] or None)
