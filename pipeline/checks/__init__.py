"""Checks made on the launching machine before any work starts, each failing in one line (exit 2).

  preflight.py    the inputs' names and the output folder: missing manifests, a folder that holds files
                  shardsmith did not write, a lock another build holds, a dataset already published
  credentials.py  Google Cloud credentials, for a build on Dataflow or with gs:// paths
"""
