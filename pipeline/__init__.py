"""The build: `shardsmith build` parses the command line, checks the inputs and the output folder, assembles the
Beam graph of transforms/ and runs it. By role:

  cli.py         the `shardsmith` command: dispatch to its commands and their exit codes
  commands/      one module per command (build, sample, verify, inspect, schema, index, versions, tag, untag,
                 compact, card, readcheck), each adding its own parser
  graph.py       the pipeline: the stages of transforms/, in order
  options/       every flag, declared once (build options, Beam's flags, the Flex Template files)
  checks/        what is checked before any work starts (preflight, credentials)
  running/       running a build: the runner, writer processes, progress, logs, the command's clock, Ctrl-C
  cloud/         the Google Cloud commands (image, dataflow, template, run-template)
  entrypoint.py  the Flex Template launcher's and Airflow's `python -m pipeline.entrypoint`
  sample.py      the demo dataset (`shardsmith sample`)

The public Python API is the `shardsmith` package (`shardsmith.load`, `shardsmith.records`); this package is what
`shardsmith build` runs.
"""
