"""Where a sweep's runner runs, behind one interface (`base`): this machine's subprocesses (`local`) or a
Ray cluster's GPU nodes (`ray_cluster`). The job manager's queues, ingest and settling serve both."""
