"""Running a build once its options are checked: the runner, and what runs beside the pipeline on the launcher.

  runner.py                which runner runs the graph (Beam's FnApiRunner for a local build), its writer
                           processes, and running to completion
  beam_call_cache.py       what Beam asks again and again while it builds and runs a local graph (a DoFn's
                           state and timers, an options view), answered once: the fixed cost of a small build
  runner_names.py          what the runner named on the command line is, read before Beam is imported
  progress.py              a local build's progress line on stderr
  quiet_logs.py            TensorFlow's and Beam's log lines kept off the terminal unless --verbose
  command_logs.py          the launcher's log on stderr (unprintable characters escaped, Beam's chatter off)
  command_clock.py         when the running command started (the summary's time counts from it)
  interrupts.py            Ctrl-C: one line and exit 130 in any phase, the build's processes stopped
"""
