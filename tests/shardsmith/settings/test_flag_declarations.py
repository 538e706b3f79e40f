"""Each build flag is declared once, on the settings field it fills (shardsmith/settings/flag.py): what argparse, the
settings objects and metadata.json's options are made from must agree with those declarations."""

from __future__ import annotations

import dataclasses

from pipeline import cli
from pipeline.checks.incremental import MUST_MATCH
from pipeline.options.arguments import build_options_from, compact_options_from
from pipeline.options.build_options import RECORDED_ORDER, BuildOptions
from pipeline.options.compact_options import CompactOptions
from pipeline.options.flags import HELP_ORDER, build_flags
from shardsmith.manifest import ManifestFormat
from shardsmith.output_folder.target import BuildTarget
from shardsmith.settings import CheckSettings, ManifestSettings, RecordSettings, RetentionSettings
from shardsmith.settings.flag import declared
from transforms.report import ReportConfig


def _options(*argv: str) -> BuildOptions:
    args, _ = cli._parser().parse_known_args(["build", "--manifest", "m.csv", "--output_dir", "o", "--name", "n",
                                              *argv])
    return build_options_from(args)


def test_the_orders_users_have_seen_name_only_declared_flags():
    names = [flag.name for flag in build_flags()]
    assert len(names) == len(set(names))
    assert names[:len(HELP_ORDER)] == list(HELP_ORDER)
    keys = [flag.recorded_key for flag in declared(BuildOptions) if flag.flag.recorded is not None]
    assert len(keys) == len(set(keys)) and set(RECORDED_ORDER) <= set(keys)


def test_the_settings_objects_hold_the_declared_defaults():
    options = _options()
    for flag in declared(BuildOptions):
        if flag.flag.required:
            continue
        holder = options
        for name in flag.path:
            holder = getattr(holder, name)
        assert holder == flag.field.default, flag.name
    # ManifestFormat (shardsmith/manifest.py) still spells its defaults; they must be the declared ones.
    assert dataclasses.asdict(ManifestFormat()) == dataclasses.asdict(ManifestSettings())


def test_a_flag_at_its_default_that_is_recorded_only_when_set_is_not_recorded():
    assert "min_side" not in _options().recorded()
    assert list(_options("--min_side", "8").recorded())[-1:] == ["min_side"]
    assert _options("--near_duplicates", "report").recorded()["near_duplicate_distance"] == 10


def test_an_incremental_build_must_match_exactly_the_flags_declared_the_same_in_every_version():
    declared_same = [flag.recorded_key for flag in declared(BuildOptions) if flag.flag.same_in_every_version]
    assert set(declared_same) == {"name", "split_ratios", "seed", "compression", "image_mode", "max_side",
                                  "reencode", "jpeg_quality", "task", "list_delimiter", "features"}
    assert list(MUST_MATCH) == [key for key in _options().recorded() if key in declared_same]  # metadata's order


def test_keep_builds_is_declared_once_and_travels_in_the_retention_settings():
    (build,) = [flag for flag in declared(BuildOptions) if flag.name == "keep_builds"]
    (compact,) = [flag for flag in declared(CompactOptions) if flag.name == "keep_builds"]
    assert build.field is compact.field and build.path == compact.path == ("retention", "keep_builds")
    assert _options("--keep_builds", "3").retention == RetentionSettings(keep_builds=3)
    assert _options().retention == RetentionSettings() == ReportConfig(BuildTarget("o", "b"), "n", 0, CheckSettings(),
                                                                       RecordSettings()).retention
    args = cli._parser().parse_args(["compact", "out", "--keep_builds", "4"])
    assert compact_options_from(args).retention == RetentionSettings(keep_builds=4)
