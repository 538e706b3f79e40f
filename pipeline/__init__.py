"""Assembles and runs the shardsmith build graph: CLI, options, runner choice, preflight checks.

`from pipeline import load` gives the read side (pipeline/reader.py), and `published_dir(out)` the folder of the
build `out` publishes; TensorFlow is imported only when `load` is called, so `import pipeline` stays cheap.
"""

from pipeline.reader import load
from transforms.build_folder import published_dir

__all__ = ["load", "published_dir"]
