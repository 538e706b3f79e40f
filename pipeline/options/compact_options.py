"""CompactOptions: `shardsmith compact`'s options, declared on their fields like the build's
(shardsmith/settings/flag.py), so that its argparse (pipeline/commands/compact.py), the compaction Flex Template's
parameters (flex_template.py) and the template entry point (pipeline/entrypoint.py) come from one declaration each. The
flags compaction shares with the build are declared once: --keep_builds by RetentionSettings
(shardsmith/settings/__init__.py), which both commands hold, and --break_lock on BuildOptions' field, taken from there.

Also the entry point's `command` parameter: the one template parameter that is no command's flag. The image
has one entry file; the compaction template's spec declares `command` as required with `compact` its only
valid value, the build template's spec does not declare it, and the entry point runs `build` when it is absent.
"""

from __future__ import annotations

import dataclasses
from dataclasses import MISSING, dataclass

from pipeline.options.build_options import BuildOptions, output_folder
from shardsmith.settings import RetentionSettings
from shardsmith.settings.flag import COUNT, FLAG, GCS_FOLDER, Flag, Template, checked, nested, option

# The entry point's parameter that picks the command (`--command=compact`); absent, the command is `build`.
COMMAND = "command"
COMMANDS = ("build", "compact")
COMMAND_TEMPLATE = Template(
    "Command", "compact: this template compacts the dataset in output_dir (the only accepted value; the build "
    "template from the same image has no command parameter)", "compact")


def build_flag(name: str) -> Flag:
    """The Flag declared on BuildOptions' field `name`: a flag compact shares is declared once, by the build."""
    return next(field for field in dataclasses.fields(BuildOptions) if field.name == name).metadata[FLAG]


@dataclass(frozen=True)
class CompactOptions:
    """`shardsmith compact`'s options (OUT is its positional argument; the template's `output_dir` parameter)."""

    output_dir: str = option(MISSING, Flag(
        "a folder holding a version made by `shardsmith build --incremental`", metavar="OUT", required=True,
        parse=output_folder, recorded=None, template=Template(
            "Output folder", "Cloud Storage folder holding a dataset built with incremental=true: its published "
            "version is compacted into a new one. Example: gs://my-bucket/datasets/flowers", GCS_FOLDER)))
    retention: RetentionSettings = nested(RetentionSettings, has_default=True)  # --keep_builds, as the build's
    compact_after: int | None = option(None, Flag(
        "compact only when a split's shards come from more than K generations; otherwise exit 0 and write "
        "nothing (for a scheduled DAG that runs compact after every build)", metavar="K", recorded=None,
        parse=checked(lambda k: k >= 1, "--compact_after must be at least 1 (a version always has one generation)"),
        template=Template(
            "Compact after K generations", "compact only when a split's shards come from more than K generations; "
            "otherwise the job writes nothing and succeeds (default: always compact)", COUNT)))
    break_lock: bool = option(False, build_flag("break_lock"))
    no_card: bool = option(False, build_flag("no_card"))
    writer_processes: int = option(-1, build_flag("writer_processes"))  # they copy the compacted shards
