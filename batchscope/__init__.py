"""BatchScope's dashboard library: history store, run-folder ingest, job queue, analysis and charts.

Never imports torch, so the app starts fast and browses history on a machine without a GPU.
"""
