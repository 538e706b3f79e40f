"""Tests are found by the path of what they test (tests/README.md): every test file outside tests/docs/,
tests/benchmarks/ and tests/data/ sits in a folder whose path under tests/ is a folder of the repository's top
level (shardsmith/..., transforms/..., pipeline/..., examples/...), or directly in tests/ when it tests the whole
tree (the import rules, this rule)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOT_BY_PATH = ("docs", "benchmarks", "data")  # what docs/ shows; scripts, not tests; inputs


def misplaced(root: Path) -> list[str]:
    """The test files under root/tests that sit in no folder mirroring one of root's, as paths under tests/."""
    tests = root / "tests"
    found = []
    for path in sorted(tests.rglob("test_*.py")):
        folder = path.parent.relative_to(tests)
        if folder.parts and folder.parts[0] in NOT_BY_PATH:
            continue
        mirrored = root / folder
        if folder.parts and (folder.parts[0] == "tests" or folder.parts[0].startswith(".") or not mirrored.is_dir()):
            found.append(path.relative_to(tests).as_posix())
    return found


def test_every_test_file_sits_at_the_path_of_what_it_tests():
    found = misplaced(ROOT)
    assert not found, f"move each to tests/<path of the module it tests>/ (tests/README.md): {found}"


def test_a_test_file_in_a_folder_the_repository_lacks_is_found(tmp_path):
    for folder in ("shardsmith/format", "pipeline", "docs", ".ci"):
        (tmp_path / folder).mkdir(parents=True)
    for test in ("test_whole_tree.py", "shardsmith/format/test_record_file.py", "pipeline/test_cli.py",
                 "docs/test_readme.py", "benchmarks/test_like.py", "stages/test_place.py",
                 "shardsmith/stages/test_gather.py", "tests/test_nested.py", ".ci/test_run.py"):
        (tmp_path / "tests" / test).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "tests" / test).write_text("")
    assert misplaced(tmp_path) == [".ci/test_run.py", "shardsmith/stages/test_gather.py", "stages/test_place.py",
                                   "tests/test_nested.py"]
