"""Where a sweep's runner runs, behind one interface (`base`): this machine's subprocesses (`local`). The job
manager's queues, ingest and settling do not depend on it."""
