"""Where a run's runner goes and how it starts: this machine's subprocess backend, or the Ray cluster for
a run sent to one of its GPU types."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from runners import spec as runner_spec

from batchscope.backends.base import Backend, LaunchError
from batchscope.backends.local import LocalBackend
from batchscope.backends.ray_cluster import RayBackend
from batchscope.jobs.follower import Active
from batchscope.runfolder import RunFolder


class Launcher:
    """Picks a run's backend and launches its runner."""

    def __init__(self, local: LocalBackend, cluster: RayBackend | None) -> None:
        self.local = local
        self.cluster = cluster  # the Ray cluster runs with a `cluster_gpu` go to; None: this machine only

    def placement(self, cluster_gpu: Any, spec: dict[str, Any]) -> dict[str, Any]:
        """The spec.json keys that send a run to the Ray cluster's `cluster_gpu` type; none for this machine."""
        if cluster_gpu is None:
            return {}
        if self.cluster is None:
            raise runner_spec.SpecError("device", "no Ray cluster is set up for this app: set BATCHSCOPE_RAY_ADDRESS "
                                                  "to send sweeps to one")
        self.cluster.check_placement(str(cluster_gpu), spec)
        return {"cluster_gpu": str(cluster_gpu)}

    def backend(self, spec: dict[str, Any]) -> Backend:
        """Where a run's runner goes: the Ray cluster for a run sent to its GPUs, else this machine."""
        if spec.get("cluster_gpu") is None:
            return self.local
        if self.cluster is None:
            raise LaunchError(f"it was sent to the Ray cluster's {spec['cluster_gpu']} GPUs, and "
                              f"BATCHSCOPE_RAY_ADDRESS is not set")
        return self.cluster

    def launch(self, run_id: str, folder: Path) -> Active:
        """Start the run's runner from its folder's spec; LaunchError when its backend refuses."""
        spec = RunFolder(folder).spec() or {}
        return Active(run_id, folder, self.backend(spec).launch(run_id, folder, spec))
