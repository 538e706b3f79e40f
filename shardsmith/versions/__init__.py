"""The versions machinery, Beam-free: see the module list in a later commit."""
