"""Beam stages for groups of identical signatures (shardsmith/near_duplicates/identical_signatures.py) within
transforms/near_duplicates.py: collapsing a signature's rows, summarising the groups for metadata.json, and the
drop decisions of a group's other rows (followers), taken from its representative.

An --incremental night's published records (HashedImage.published) are grouped apart from its new images: a
group of published records is compared through its representative like any group, but neither summarised (it
was, when its records were new) nor followed (a published record is never dropped)."""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

import apache_beam as beam

from shardsmith.near_duplicates.identical_signatures import (
    MAX_LISTED_GROUPS,
    IdenticalGroup,
    collapse_identical,
    signature_key,
)

GROUPS = "groups"
FOLLOWERS = "followers"
LEAKED_SPLITS = ("validation", "test")  # the splits whose copy of a training image `drop` turns into an error


def _collapsed_rows(keyed, with_followers: bool) -> Iterator:
    """One signature's rows -> the rows to compare; for a collapsed group of new rows also its summary (tagged
    `groups`) and, for `drop`, (representative key, (follower key, follower split, representative split,
    representative URI)) for each other row (tagged `followers`)."""
    (_, published), rows = keyed
    collapsed = collapse_identical(lambda: rows)
    yield from collapsed.compared
    group = collapsed.group
    if group is None or published:
        return
    yield beam.pvalue.TaggedOutput(GROUPS, group)
    if with_followers:
        kept = group.representative
        for follower in collapsed.followers:
            yield beam.pvalue.TaggedOutput(FOLLOWERS, (kept.key, (follower.key, follower.split, kept.split, kept.uri)))


@dataclass
class GroupsSummary:
    num_groups: int = 0
    num_images: int = 0
    largest: list = field(default_factory=list)  # the MAX_LISTED_GROUPS largest IdenticalGroups


class SummarizeGroupsFn(beam.CombineFn):
    """Counts the collapsed groups and their rows, and keeps the MAX_LISTED_GROUPS largest (then by key)."""

    def create_accumulator(self) -> GroupsSummary:
        return GroupsSummary()

    def add_input(self, summary: GroupsSummary, group: IdenticalGroup) -> GroupsSummary:
        return self.merge_accumulators([summary, GroupsSummary(1, group.size, [group])])

    def merge_accumulators(self, summaries: Iterable[GroupsSummary]) -> GroupsSummary:
        merged = GroupsSummary()
        for s in summaries:
            merged.num_groups += s.num_groups
            merged.num_images += s.num_images
            merged.largest = heapq.nsmallest(MAX_LISTED_GROUPS, merged.largest + s.largest,
                                             key=IdenticalGroup.sort_key)
        return merged

    def extract_output(self, summary: GroupsSummary) -> GroupsSummary:
        return summary


def _within_group_decision(keyed) -> Iterator:
    """A follower in validation or test of a group whose representative is in train: a copy at distance 0."""
    kept_key, (key, split, kept_split, kept_uri) = keyed
    if kept_split == "train" and split in LEAKED_SPLITS:
        yield key, (0, kept_key, kept_uri, kept_split, "")


def _inherited_decisions(keyed) -> Iterator:
    """The representative's own drop decision (its closest copy kept elsewhere), for each of its followers on its
    side of the pair (validation and test; or, for a new training image dropped as a copy of a published
    validation/test record, train): they have its signature, so they are the same distance from that copy."""
    _, grouped = keyed
    decisions = list(grouped["decisions"])
    if not decisions:
        return
    best = min(decisions)
    for key, split, kept_split, _ in grouped["followers"]:
        if (split == "train") == (kept_split == "train"):
            yield key, best


class Collapsed(NamedTuple):
    compared: beam.PCollection  # HashedImages to compare: every row of a small group, a big group's representative
    groups: beam.PCollection  # IdenticalGroup
    followers: beam.PCollection  # (representative key, (key, split, representative split, URI)), if asked for


class CollapseIdentical(beam.PTransform):
    """HashedImages -> the rows to compare, with more than MAX_EXPANDED_GROUP rows of one signature collapsed to
    their representative; the groups; and, `with_followers` (for `drop`), each collapsed row's representative."""

    def __init__(self, with_followers: bool):
        super().__init__()
        self._with_followers = with_followers

    def expand(self, images):
        collapsed = (
            images
            | "KeyBySignature" >> beam.Map(lambda image: ((signature_key(image), image.published), image))
            | "GroupBySignature" >> beam.GroupByKey()
            | "CollapseGroups" >> beam.FlatMap(_collapsed_rows, self._with_followers).with_outputs(
                GROUPS, FOLLOWERS, main="compared")
        )
        return Collapsed(collapsed.compared, collapsed[GROUPS], collapsed[FOLLOWERS])


class FollowerDecisions(beam.PTransform):
    """(pair decisions keyed by row key, followers) -> the drop decisions of the followers: within their group,
    and inherited from their representative's own."""

    def expand(self, inputs):
        pair_decisions, followers = inputs
        within_groups = followers | "WithinGroups" >> beam.FlatMap(_within_group_decision)
        inherited = (
            {"decisions": pair_decisions, "followers": followers}
            | "JoinRepresentatives" >> beam.CoGroupByKey()
            | "FromRepresentatives" >> beam.FlatMap(_inherited_decisions)
        )
        return (within_groups, inherited) | "FollowerDecisions" >> beam.Flatten()
