"""The layout's import rules (docs/design.md), checked on the source and in a fresh interpreter.

- shardsmith.storage (where files live) imports nothing else of shardsmith's, and Beam's file systems, Google's
  storage client and TensorFlow only inside a function. It is the only package that imports Beam's file systems,
  Google's storage client or boto3, or tells a gs:// or s3:// path apart.
- shardsmith.format (what a dataset is) imports only storage (its transform_fn template's maker aside, which runs
  tensorflow-transform and which nothing imports).
- shardsmith.output_folder (the output folder and its versions: layout, a build's lifecycle, publishing, retention,
  tags, the retired list, the lock, opening a version, a build's target) imports only the format and storage (and
  shardsmith.errors' UsageError), never Beam or TensorFlow: the shard writer (which checks the lock), the settings
  (retention's defaults) and the read side import it. Outside it, code imports its package's names, never one of its
  modules, and only its publishing module switches metadata.json (`publish`, which the package does not export).
- The Beam-free work is one part per concern, each importing only the parts listed under it here (and the output
  folder, the format, storage, and the shared shardsmith.errors and shardsmith.printable), from the bottom up:
  shardsmith.settings (every build option's declaration, the defaults it declares, flag.py) imports no other;
  shardsmith.fault_injection and shardsmith.progress_signal (modules) import none; shardsmith.images (load,
  re-encode, masks, image file names) imports settings; shardsmith.rows (the row model, row identity, failures)
  imports images; shardsmith.placement (the keyed hashes, rank groups and dealing, a writer process's job too)
  imports rows; shardsmith.near_duplicates (signatures, the search, identical signatures) imports images and
  settings; shardsmith.manifest (the formats, annotations, label lists, look-alike labels) imports rows, images and
  settings; shardsmith.shard_writer (shard files, split shards, the writer processes, encoding, parallel parsing)
  imports all of those. None of them, nor the output folder or the format, imports Beam or TensorFlow: a shard
  writer process loads them and stays tens of megabytes.
- Every module of shardsmith/, transforms/ and pipeline/ is at most 400 lines: one concern each.
- No two parts (each package or module directly under shardsmith/, and pipeline's and transforms' own) import
  each other both ways, and the parts import no circle: each can be read and tested from the bottom up.
- shardsmith.versions (carry-over, rewrites, compaction) imports only the output folder, the Beam-free work, the format
  and storage, never Beam or TensorFlow; nothing below it (the work, output folder, format, storage) and nothing of the
  read side imports it. Outside it and its stages (transforms/versions/), code imports its package's names, never one of
  its modules.
- transforms/ (the stages) never imports the build (pipeline/) or the read side (shardsmith.read), and each
  of its modules holds a PTransform.
- shardsmith.read (load, records, the dataset checks, the summary) never imports a stage or the build, and only
  reads: it opens a version through the output folder's `open_version`, takes no lock, writes, renames or
  deletes no file, and parses no command line.
- The commands (pipeline/commands/, one module per `shardsmith` command, each adding its own parser) may import
  the library; nothing of the library (shardsmith/, transforms/, the build's parts of pipeline/) imports a command,
  and no command imports another (what they share is pipeline/commands/shared.py). Only pipeline/cli.py, the
  dispatch, imports them.
- shardsmith.card (the dataset card and the read check) reads through the read side and never imports a stage,
  the build or the versions; TensorFlow and torch only inside the read check's readers. It is the one part of the
  read side a stage calls: a build's report and a compaction write the version's card under the lock.
- Manifests are read through shardsmith.manifest (the package's interface), never one of its modules from
  outside it: a new manifest format is then one module there.
- The read side takes from the Beam-free work only the manifest package's interface, the row model, reading an
  input file (shardsmith.images.load_images) and the progress signal: never the shard writer, the near-duplicate
  search, the settings or the fault injection (nor, from the output folder, the lock).
- The framework readers (shardsmith/torch/, shardsmith/grain.py) build on shardsmith.read's TensorFlow-free
  record reader: they never import TensorFlow, Beam (even gs:// goes through shardsmith.read), a stage or the
  build; torch is imported by shardsmith/torch/ alone (and, when run, by the read check's torch readers), so
  `import shardsmith` never loads it.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BEAM_FOR_REMOTE_FILES = ("apache_beam.io.filesystems", "apache_beam.io.filesystem", "apache_beam.io.gcp.gcsio")
GOOGLE_CLOUD = ("google.cloud.storage", "google.api_core")  # the Cloud Storage client under Beam's gcsio
AWS = ("boto3", "botocore")  # s3:// (shardsmith/storage/s3_objects.py)



def _modules(package: str) -> list[Path]:
    """The source files of a package, or of a module (a part like shardsmith.fault_injection)."""
    module = ROOT / (package.replace(".", "/") + ".py")
    return [module] if module.is_file() else sorted((ROOT / package.replace(".", "/")).rglob("*.py"))


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(module imported, at module level) for every import statement of a file."""
    tree = ast.parse(path.read_text(), str(path))
    top = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, id(node) in top) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
            found += [(node.module if not any(n in _packages() for n in names) else n, id(node) in top)
                      for n in names]
    return found


# The Beam-free work's parts, each with the others it may import (besides BELOW_THE_WORK and COMMON).
WORK_PARTS = {
    "shardsmith.settings": (),
    "shardsmith.fault_injection": (),
    "shardsmith.progress_signal": (),
    "shardsmith.images": ("shardsmith.settings",),
    "shardsmith.rows": ("shardsmith.images",),
    "shardsmith.placement": ("shardsmith.rows",),
    "shardsmith.near_duplicates": ("shardsmith.images", "shardsmith.settings"),
    "shardsmith.manifest": ("shardsmith.rows", "shardsmith.images", "shardsmith.settings"),
    "shardsmith.shard_writer": ("shardsmith.manifest", "shardsmith.rows", "shardsmith.images",
                                "shardsmith.near_duplicates", "shardsmith.settings", "shardsmith.fault_injection",
                                "shardsmith.progress_signal"),
}
BELOW_THE_WORK = ("shardsmith.output_folder", "shardsmith.format", "shardsmith.storage")
COMMON = ("shardsmith.errors", "shardsmith.printable")  # modules of shardsmith's that import nothing of it
LIBRARY_PARTS = ("shardsmith.card", "shardsmith.read", "shardsmith.versions", "shardsmith.torch", "shardsmith.grain",
                 "shardsmith.elastic", "shardsmith.tensorflow_import", *BELOW_THE_WORK, *COMMON, *WORK_PARTS)


def _packages() -> set[str]:
    return {*LIBRARY_PARTS, "transforms"}


def _under(name: str, *prefixes: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _broken(package: str, forbidden: tuple[str, ...], top_level_only: tuple[str, ...] = (),
            allowed_lazy: tuple[str, ...] = ()) -> list[str]:
    broken = []
    for path in _modules(package):
        for name, at_top in _imports(path):
            if _under(name, *forbidden) or (at_top and _under(name, *top_level_only)) or (
                    not at_top and _under(name, *top_level_only) and not _under(name, *allowed_lazy)):
                broken.append(f"{path.relative_to(ROOT)} imports {name}" + ("" if at_top else " (in a function)"))
    return broken


def test_storage_imports_nothing_else_of_shardsmith_and_beam_or_tensorflow_only_when_called():
    assert _broken("shardsmith.storage", (*WORK_PARTS, "shardsmith.format", "shardsmith.output_folder",
                                          "shardsmith.read", "shardsmith.versions", "shardsmith.errors", "transforms",
                                          "pipeline"),
                   top_level_only=("apache_beam", "tensorflow", *GOOGLE_CLOUD),
                   allowed_lazy=(*BEAM_FOR_REMOTE_FILES, "google.api_core.exceptions", "tensorflow")) == []


# The one exception: the maker of transform_fn's template runs tensorflow-transform (by hand, after an upgrade,
# and in its test); no other module imports it.
TEMPLATE_MAKER = "shardsmith.format.transform_fn_template"


def test_the_format_imports_only_storage_and_neither_beam_nor_tensorflow():
    broken = _broken("shardsmith.format", (*WORK_PARTS, "shardsmith.output_folder", "shardsmith.read",
                                           "shardsmith.versions", "transforms", "pipeline", "tensorflow", "apache_beam",
                                           *GOOGLE_CLOUD))
    maker = f"{TEMPLATE_MAKER.replace('.', '/')}.py imports "
    assert [line for line in broken if not (line.startswith(maker) and line.endswith("(in a function)"))] == []


def test_nothing_imports_the_template_maker():
    importers = [f"{path.relative_to(ROOT)}" for package in ("shardsmith", "pipeline", "transforms")
                 for path in _modules(package) for name, _ in _imports(path) if _under(name, TEMPLATE_MAKER)]
    assert importers == []


def test_the_output_folder_imports_only_the_format_and_storage_and_neither_beam_nor_tensorflow():
    assert _broken("shardsmith.output_folder", (*WORK_PARTS, "shardsmith.versions", "shardsmith.read",
                                                "shardsmith.card", "transforms", "pipeline", "tensorflow",
                                                "apache_beam", *GOOGLE_CLOUD)) == []


def test_the_output_folder_is_used_through_the_package_only():
    inside = ROOT / "shardsmith" / "output_folder"
    broken = [f"{path.relative_to(ROOT)} imports {name}"
              for package in ("shardsmith", "transforms", "pipeline") for path in _modules(package)
              if inside not in path.parents
              for name, _ in _imports(path) if name.startswith("shardsmith.output_folder.")]
    assert broken == []


@pytest.mark.parametrize("part", sorted(WORK_PARTS))
def test_each_part_of_the_work_imports_only_the_parts_below_it_and_neither_beam_nor_tensorflow(part):
    others = [p for p in LIBRARY_PARTS if p not in (part, *WORK_PARTS[part], *BELOW_THE_WORK, *COMMON)]
    assert _broken(part, (*others, "transforms", "pipeline", "tensorflow", "apache_beam", *GOOGLE_CLOUD)) == []


def test_versions_import_only_the_output_folder_work_format_and_storage_and_neither_beam_nor_tensorflow():
    assert _broken("shardsmith.versions", ("shardsmith.read", "transforms", "pipeline", "tensorflow", "apache_beam",
                                           *GOOGLE_CLOUD)) == []


# The versions part: its Beam-free package and its stages, which may use each other's modules.
VERSIONS_PART = (ROOT / "shardsmith" / "versions", ROOT / "transforms" / "versions")


def test_versions_are_used_through_the_package_only():
    broken = [f"{path.relative_to(ROOT)} imports {name}"
              for package in ("shardsmith", "transforms", "pipeline") for path in _modules(package)
              if not any(part in path.parents for part in VERSIONS_PART)
              for name, _ in _imports(path) if name.startswith("shardsmith.versions.")]
    assert broken == []


def test_only_the_output_folders_publishing_module_publishes_a_version():
    """The top-level metadata.json is switched (`publish`) in one place, shardsmith/output_folder/publishing.py,
    whose `publish_version` a build's report and a compaction both call: the package does not export the switch,
    and no module outside it is handed it."""
    import shardsmith.output_folder as output_folder

    assert "publish" not in output_folder.__all__ and "publish_version" in output_folder.__all__
    defined, importers = [], []
    for package in ("shardsmith", "transforms", "pipeline"):
        for path in _modules(package):
            tree = ast.parse(path.read_text(), str(path))
            defined += [str(path.relative_to(ROOT)) for node in tree.body
                        if isinstance(node, ast.FunctionDef) and node.name == "publish"]
            importers += [str(path.relative_to(ROOT)) for node in ast.walk(tree)
                          if isinstance(node, ast.ImportFrom) and _under(node.module or "", "shardsmith.output_folder")
                          and any(alias.name == "publish" for alias in node.names)]
    assert defined == ["shardsmith/output_folder/publishing.py"]
    assert importers == []


def _tests_for_cloud_storage(path: Path) -> list[int]:
    """Lines of `path` that test a string with startswith("gs://") or "s3://" (or a tuple holding one)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "startswith"
                and node.args):
            arg = node.args[0]
            texts = arg.elts if isinstance(arg, ast.Tuple) else [arg]
            if any(isinstance(t, ast.Constant) and isinstance(t.value, str) and t.value.startswith(("gs:", "s3:"))
                   for t in texts):
                lines.append(node.lineno)
    return lines


def test_only_storage_opens_lists_or_tells_apart_gs_paths():
    """No module but shardsmith/storage imports Beam's file systems, the GCS client or boto3, or tests a path for
    gs:// or s3:// itself (messages that mention them are text, not a test)."""
    broken = []
    for package in ("shardsmith", "transforms", "pipeline"):
        for path in _modules(package):
            relative = str(path.relative_to(ROOT))
            if relative.startswith("shardsmith/storage/"):
                continue
            broken += [f"{relative} imports {name}" for name, _ in _imports(path)
                       if _under(name, *BEAM_FOR_REMOTE_FILES, *GOOGLE_CLOUD, *AWS)]
            broken += [f"{relative}:{line} tests a path for gs:// or s3://" for line in _tests_for_cloud_storage(path)]
    assert broken == []


def test_stages_never_import_the_build_or_the_read_side():
    assert _broken("transforms", ("pipeline", "shardsmith.read")) == []


# What the read side takes from the Beam-free work: the manifest package's interface (inspect's plots), row types
# and placing_label_id (the dataset checks), error reasons (the summary), reading an input file (image_mode path)
# and the progress signal (records checked). Never a shard writer's own work (nor, from the output folder, the
# lock: test_the_read_side_only_reads).
READ_SIDE_TAKES_FROM_THE_WORK = ("shardsmith.manifest", "shardsmith.rows", "shardsmith.rows.failures",
                                 "shardsmith.images.load_images", "shardsmith.progress_signal")


def test_the_card_imports_no_stage_build_or_versions_and_loads_without_beam_or_tensorflow():
    assert _broken("shardsmith.card", ("transforms", "pipeline", "shardsmith.versions", "apache_beam"),
                   top_level_only=("tensorflow", "torch"), allowed_lazy=("tensorflow", "torch")) == []
    code = ("import sys, shardsmith.card, shardsmith.card.read_check\n"
            "print(sorted(m for m in ('apache_beam', 'tensorflow', 'torch') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_the_read_side_never_imports_a_stage_or_the_build():
    assert _broken("shardsmith.read", ("transforms", "pipeline", "shardsmith.versions")) == []
    taken = [f"{path.relative_to(ROOT)} imports {name}" for path in _modules("shardsmith.read")
             for name, _ in _imports(path) if _under(name, *WORK_PARTS)
             and not _under(name, *READ_SIDE_TAKES_FROM_THE_WORK)]
    assert taken == []


# What changes a dataset's folder (shardsmith.storage's writes, the lock, tags, cards, retention) and what parses a
# command line: none of it is the read side's.
WRITES = ("write_atomically", "write_atomically_from", "write_bytes", "create", "touch", "make_folder",
          "make_folders", "rename", "delete", "remove_empty_folders", "remove_tree", "remove_temporaries",
          "write_tags", "write_card", "acquire_lock", "lock_for_command", "release_lock", "retire_builds", "publish",
          "publish_version", "publish_nothing", "start_build", "remove_build", "remove_temporary_files",
          "record_retired")


def _names_used(path: Path) -> set[str]:
    """Every name a module imports, calls or reads as an attribute (storage.write_atomically counts)."""
    used: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            used |= {alias.name for alias in node.names} | {node.module or ""}
        elif isinstance(node, ast.Import):
            used |= {alias.name for alias in node.names}
        elif isinstance(node, ast.Attribute):
            used.add(node.attr)
        elif isinstance(node, ast.Name):
            used.add(node.id)
    return used


def test_the_read_side_only_reads():
    """shardsmith/read/ holds no command: it takes no lock, changes no file and parses no command line (`shardsmith
    index`, `tag`, `verify`, ... are pipeline/commands/)."""
    broken = [f"{path.relative_to(ROOT)} uses {name}" for path in _modules("shardsmith.read")
              for name in sorted(_names_used(path) & {*WRITES, "argparse", "build_lock", "register_subparser"})]
    assert broken == []


COMMANDS_PACKAGE = ROOT / "pipeline" / "commands"
DISPATCH = ROOT / "pipeline" / "cli.py"


def test_nothing_of_the_library_imports_a_command_and_no_command_imports_another():
    importers = [f"{path.relative_to(ROOT)} imports {name}"
                 for package in ("shardsmith", "transforms", "pipeline") for path in _modules(package)
                 if COMMANDS_PACKAGE not in path.parents and path != DISPATCH
                 for name, _ in _imports(path) if _under(name, "pipeline.commands")]
    crossing = [f"{path.relative_to(ROOT)} imports {name}" for path in _modules("pipeline.commands")
                for name, _ in _imports(path)
                if _under(name, "pipeline.commands") and not _under(name, "pipeline.commands.shared")]
    assert importers == []
    assert crossing == []


def test_each_command_is_a_module_that_registers_its_own_parser():
    """pipeline/commands/<command>.py for every `shardsmith <command>` (the cloud commands are pipeline/cloud/'s),
    each adding its parser with `register_subparser` and setting its handler; pipeline/cli.py only dispatches."""
    from pipeline import cli

    modules = {path.stem for path in _modules("pipeline.commands")} - {"__init__", "shared"}
    assert modules == set(cli.COMMANDS)
    _, parsers = cli._parsers()
    assert {name for name, parser in parsers.items() if parser.get_default("run") is not None} == modules
    for name in modules:
        module = __import__(f"pipeline.commands.{name}", fromlist=["register_subparser"])
        assert parsers[name].get_default("run").__module__ == module.__name__


def test_every_module_stays_at_most_400_lines():
    """Modules of a few hundred lines, one concern each: the commands, the dispatch, the dataset checks and every
    other module of the library, the stages and the build. A longer one is split where its concerns part."""
    modules = [path for package in ("shardsmith", "transforms", "pipeline") for path in _modules(package)]
    longer = {str(path.relative_to(ROOT)): n for path in modules if (n := len(path.read_text().splitlines())) > 400}
    assert len(modules) > 100 and DISPATCH in modules
    assert longer == {}


def test_manifests_are_read_through_the_manifest_package_only():
    inside = ROOT / "shardsmith" / "manifest"
    broken = [f"{path.relative_to(ROOT)} imports {name}"
              for package in ("shardsmith", "transforms", "pipeline") for path in _modules(package)
              if inside not in path.parents
              for name, _ in _imports(path) if name.startswith("shardsmith.manifest.")]
    assert broken == []


def _imports_tfrecord_framing(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module == "shardsmith.format.tfrecord":
            return True
        if isinstance(node, ast.ImportFrom) and node.module == "shardsmith.format" and any(
                alias.name == "tfrecord" for alias in node.names):
            return True
        if isinstance(node, ast.Import) and any(a.name == "shardsmith.format.tfrecord" for a in node.names):
            return True
    return False


def test_record_files_are_framed_and_read_through_the_record_file_face_only():
    """Outside shardsmith/format/, writers, readers, rewriters and compaction reach the record file through
    shardsmith/format/record_file.py: a second record-file format is then a module and a table entry there."""
    inside = ROOT / "shardsmith" / "format"
    broken = [str(path.relative_to(ROOT)) for package in ("shardsmith", "transforms", "pipeline")
              for path in _modules(package) if inside not in path.parents and _imports_tfrecord_framing(path)]
    assert broken == []


READ_SIDE_SHARED_STEPS = ("open_version", "version_folder", "open_build", "read_metadata", "split_name",
                          "split_shards", "check_shards")


def test_each_shared_step_of_the_readers_is_defined_once():
    """A version becomes a folder, metadata.json is read and a split's shards are listed in one place each
    (shardsmith/read/version_files.py, shardsmith/format/metadata.py), not once per reader."""
    defined: dict[str, list[str]] = {name: [] for name in READ_SIDE_SHARED_STEPS}
    for path in _modules("shardsmith"):
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, ast.FunctionDef) and node.name in defined:
                defined[node.name].append(str(path.relative_to(ROOT)))
    assert {name: where for name, where in defined.items() if len(where) > 1} == {}


# transforms/ modules that are not stages
SHARED_PLUMBING = ("__init__.py", "thread_pool.py", "metrics.py", "gather.py", "row_coder.py")


@pytest.mark.parametrize("path", [p for p in _modules("transforms") if p.name not in SHARED_PLUMBING],
                         ids=lambda p: p.name)
def test_each_stage_module_holds_a_ptransform(path):
    tree = ast.parse(path.read_text())
    bases = [ast.unparse(base) for node in tree.body if isinstance(node, ast.ClassDef) for base in node.bases]
    assert "beam.PTransform" in bases, f"{path.name} holds no PTransform: is it a stage?"


def test_format_output_folder_work_and_versions_load_without_beam_or_tensorflow_in_a_fresh_interpreter():
    """Every module a shard writer process can import (the Beam-free work, what it stands on), and the versions."""
    names = sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for package in ("shardsmith.storage", "shardsmith.format", "shardsmith.output_folder", *WORK_PARTS,
                        "shardsmith.versions")
        for p in _modules(package)
    )
    names = [n for n in names if not n.endswith("__main__")]
    code = ("import importlib, sys\n"
            f"for name in {names!r}:\n"
            "    importlib.import_module(name)\n"
            "import shardsmith\n"
            "print(sorted(m for m in ('apache_beam', 'tensorflow') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", f"imported by {names}: {done.stdout}"
    assert len(names) >= 15


def _options_imports() -> dict[str, set[str]]:
    """pipeline.options' modules -> the pipeline.options modules each imports, at any level (in a function too)."""
    graph = {}
    for path in _modules("pipeline.options"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        tree = ast.parse(path.read_text(), str(path))
        imported = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
        graph[name] = {m for m in imported if m.startswith("pipeline.options.") and m != name}
    return graph


def test_the_flag_modules_import_no_circle_and_nothing_else_of_the_build():
    """pipeline/options/ (the flag modules) has no import circle, even through a function's import, and imports
    nothing of pipeline/ outside itself: pipeline/cloud/ runs it without Beam."""
    graph = _options_imports()
    assert len(graph) >= 7
    modules = set(graph)
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, "import circle: " + " -> ".join((*path, name))
        if name not in done:
            for imported in graph.get(name, ()) & modules:
                visit(imported, (*path, name))
            done.add(name)

    for name in sorted(graph):
        visit(name, ())
    assert _broken("pipeline.options", ("transforms", "shardsmith.read", "tensorflow", "pipeline.cli",
                                        "pipeline.graph", "pipeline.running.runner", "pipeline.cloud"),
                   top_level_only=("apache_beam",), allowed_lazy=("apache_beam.options",)) == []


def test_the_flag_modules_load_without_beam_or_tensorflow_in_a_fresh_interpreter():
    names = sorted(".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
                   for p in _modules("pipeline.options"))
    code = ("import importlib, sys\n"
            f"for name in {names!r}:\n"
            "    importlib.import_module(name)\n"
            "from pipeline.options.flags import build_flags\n"
            "from pipeline.options.flex_template import generated\n"
            "generated()\n"
            "print(sorted(m for m in ('apache_beam', 'tensorflow') if m in sys.modules), len(build_flags()))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["[]", "41"]
FRAMEWORK_READERS = ("shardsmith.torch", "shardsmith.grain")


def test_the_framework_readers_import_neither_tensorflow_nor_beam_and_torch_only_there():
    broken = [f"{path.relative_to(ROOT)} imports {name}" for part in FRAMEWORK_READERS for path in _modules(part)
              for name, _ in _imports(path) if _under(name, "tensorflow", "apache_beam", "transforms", "pipeline")]
    torch_users = {str(path.relative_to(ROOT)): at_top for path in _modules("shardsmith")
                   for name, at_top in _imports(path) if _under(name, "torch")}
    inside = {path: at_top for path, at_top in torch_users.items() if path.startswith("shardsmith/torch/")}
    outside = {path: at_top for path, at_top in torch_users.items() if path not in inside}
    # The read check's torch readers (run in a process of their own by `shardsmith readcheck`) import it when run.
    assert broken == [] and inside and all(inside.values()) and outside == {"shardsmith/card/readers.py": False}


def test_the_framework_readers_load_without_tensorflow_or_beam_in_a_fresh_interpreter():
    code = ("import sys, shardsmith.torch, shardsmith.grain, shardsmith.read.record_sequence\n"
            "print(sorted(m for m in ('apache_beam', 'tensorflow', 'grain') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", "shardsmith.grain imports grain only in dataset()"


def _own_module(name: str, modules: set[str]) -> str | None:
    """The module of shardsmith's own that an imported name lands in (`a.b.c` for `from a.b import c` when a.b.c is
    a module, else `a.b`), or None for another package's."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _import_graph() -> dict[str, set[str]]:
    """Every module of pipeline/, transforms/ and shardsmith/ -> the modules of those it imports, at any level
    (inside a function too: a circle through a lazy import is still a circle in the design)."""
    paths = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
             for package in ("pipeline", "transforms", "shardsmith") for p in _modules(package)}
    graph = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found |= {_own_module(alias.name, set(paths)) for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package
                    for _ in range(node.level - 1):
                        anchor = anchor.rpartition(".")[0]
                    base = f"{anchor}.{base}".rstrip(".")
                found |= {_own_module(f"{base}.{alias.name}", set(paths)) for alias in node.names}
        graph[name] = found - {None, name}
    return graph


def test_no_import_circle_anywhere():
    """No module of the build, the stages or the library imports itself back through others: each part can be
    read, tested and changed from the bottom up (docs/design.md)."""
    graph = _import_graph()
    assert len(graph) > 100
    assert _circles(graph) == []


def _circles(graph: dict[str, set[str]]) -> list[str]:
    """Every circle a depth-first walk of `graph` (name -> names it imports) closes, as `a -> b -> a`."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    circles = []

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for imported in sorted(graph.get(name, ())):
            if state.get(imported) == 1:
                circles.append(" -> ".join([*path[path.index(imported):], imported]))
            elif imported not in state:
                visit(imported, [*path, imported])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    return circles


def _part(module: str) -> str:
    """The part a module belongs to: the package or module directly under shardsmith/, pipeline/ or transforms/
    (`shardsmith.rows.failures` is shardsmith.rows; the top packages' own __init__ are parts of their own)."""
    return ".".join(module.split(".")[:2])


def _part_graph() -> dict[str, set[str]]:
    parts: dict[str, set[str]] = {}
    for name, imported in _import_graph().items():
        parts.setdefault(_part(name), set()).update(_part(other) for other in imported)
    return {part: imported - {part} for part, imported in parts.items()}


def test_no_two_parts_import_each_other_both_ways_and_parts_import_no_circle():
    """Settings at the bottom, then images, rows, near duplicates, manifests, the shard writer, the versions, the
    stages and the build: a part is changed and tested from the bottom up, even through a function's import."""
    graph = _part_graph()
    assert {"shardsmith.settings", "shardsmith.manifest", "shardsmith.shard_writer", "transforms.report"} <= set(graph)
    both_ways = sorted(f"{a} <-> {b}" for a in graph for b in graph[a] if a < b and a in graph.get(b, ()))
    assert both_ways == []
    assert _circles(graph) == []
