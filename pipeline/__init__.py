"""The build: `shardsmith build` parses the command line, checks the inputs and the output folder, assembles the
Beam graph of transforms/ and runs it. By role:

  cli.py         the `shardsmith` command (build, sample, verify, inspect, schema, index; the cloud commands)
  graph.py       the pipeline: the stages of transforms/, in order
  options/       every flag, declared once (build options, Beam's flags, the Flex Template files)
  checks/        what is checked before any work starts (preflight, credentials)
  running/       running a build: the runner, writer processes, progress, quiet logs, Ctrl-C
  cloud/         the Google Cloud commands (image, dataflow, template, run-template)
  entrypoint.py  the Flex Template launcher's and Airflow's `python -m pipeline.entrypoint`
  sample.py      `shardsmith sample`: the demo dataset
  schema.py      `shardsmith schema`: --feature flags for a manifest's extra columns

The public Python API is the `shardsmith` package (`shardsmith.load`, `shardsmith.records`); this package is what
`shardsmith build` runs.
"""
