"""Never lose users' data, never trust their inputs: a dataset name is exactly what it looks like, and shard
writer processes die with the build that started them."""

from __future__ import annotations


def test_name_with_a_trailing_line_break_is_a_usage_error(tmp_path, shardsmith, label_sorted_set):
    result = shardsmith("build", "--manifest", label_sorted_set.manifest, "--output_dir", tmp_path / "o",
                        "--name", "ds\n")
    assert result.code == 2
    assert result.err.startswith("shardsmith: error: --name") and len(result.err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()
