"""Running a build once its options are checked: the runner, and what runs beside the pipeline on the launcher.

  runner.py                which runner runs the graph (Beam's FnApiRunner for a local build), its writer
                           processes, and running to completion
  runner_names.py          what the runner named on the command line is, read before Beam is imported
  progress.py              a local build's progress line on stderr
  quiet_logs.py            TensorFlow's and Beam's log lines kept off the terminal unless --verbose
  interrupts.py            Ctrl-C: one line and exit 130 in any phase, the build's processes stopped
"""
