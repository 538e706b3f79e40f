"""The stages of versions: see the module list in a later commit."""
