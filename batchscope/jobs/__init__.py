"""Background sweeps: JobManager (jobs.manager) over its queue, launcher, follower and recovery modules."""
from batchscope.jobs.manager import JobManager, make_run_id
from batchscope.jobs.recovery import settle_if_runner_gone

__all__ = ["JobManager", "make_run_id", "settle_if_runner_gone"]
