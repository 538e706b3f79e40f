"""The build: parses the command line, checks the inputs and the output folder, assembles the Beam graph of
transforms/ and runs it (CLI, options, runner choice, preflight checks, the cloud commands).

The public Python API is the `shardsmith` package (`shardsmith.load`); this package is what `shardsmith build`
runs.
"""
