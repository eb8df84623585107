"""The Ray backend: a sweep sent to one of a Ray cluster's GPU types runs as a detached, named actor
(runners.host.SweepHost) on a node with one free GPU of that type per rank, queued by Ray's scheduler until
one has them. The app pulls every file the runner writes there into its own run folder, so no shared file
system is needed and the app stays the only DuckDB writer.

`ray` is imported, and the cluster joined, only when a backend is first used: an app without
BATCHSCOPE_RAY_ADDRESS never imports it.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import runners
from batchscope.backends.base import LaunchError, exit_outcome
from batchscope.runfolder import RunFolder
from runners.host import HostReport, SweepHost
from runners.results import contract
from runners.spec import SpecError, SweepSpec
from runners.spec.parallel import world_size

log = logging.getLogger(__name__)

NAMESPACE = "batchscope"  # the run's actor is named by its run id in here, so a restarted app finds it
ACCELERATOR = "accelerator_type:"  # the resource Ray gives a node per GPU type it has (asked for by accelerator_type=)
CALL_TIMEOUT_S = 30.0
TYPES_MAX_AGE_S = 5.0  # how long a reading of the cluster's GPUs (or its failure) serves the New sweep page
JOIN_RETRY_S = 30.0  # a failed join (30 s for a ray:// address nobody answers) is not tried again before this


class ClusterError(LaunchError):
    """The Ray cluster cannot be joined, or did not answer a request."""


@dataclass(frozen=True)
class GpuType:
    """One GPU type of the cluster's live nodes, as the New sweep page offers it."""

    name: str  # Ray's accelerator type, e.g. H200
    total: int
    free: int  # not held by any task or actor now
    free_on_one_node: int  # the most one sweep can get now: a sweep's ranks share a node
    per_node: int  # the most GPUs of this type one node has: a sweep with more ranks never fits


def gpu_types(nodes: list[dict[str, Any]], available: dict[str, dict[str, float]]) -> list[GpuType]:
    """Each GPU type of the live nodes in `nodes` (ray.nodes()) with its free GPUs (`available`: each node's
    free resources by node id), by name."""
    by_type: dict[str, list[tuple[int, int]]] = {}
    for node in nodes:
        resources = node.get("Resources") or {}
        gpus = int(resources.get("GPU", 0))
        if not node.get("Alive") or not gpus:
            continue
        free = int(available.get(node["NodeID"], {}).get("GPU", 0))
        for key in resources:
            if key.startswith(ACCELERATOR):
                by_type.setdefault(key.removeprefix(ACCELERATOR), []).append((gpus, free))
    return [GpuType(name, sum(g for g, _ in counts), sum(f for _, f in counts), max(f for _, f in counts),
                    max(g for g, _ in counts))
            for name, counts in sorted(by_type.items())]


def placement_problem(gpu: str, needed: int, types: list[GpuType]) -> str | None:
    """Why a sweep of `needed` ranks can never be placed on the cluster's `gpu` GPUs (its ranks share a
    node), or None when a node has enough of them (Ray then queues it until they are free)."""
    found = next((t for t in types if t.name == gpu), None)
    if found is None:
        return f"the Ray cluster has no {gpu} GPU (it has: {', '.join(t.name for t in types) or 'none'})"
    if found.per_node < needed:
        return (f"{needed} ranks need {needed} {gpu} GPUs on one node; the cluster's largest {gpu} node has "
                f"{found.per_node}")
    return None


def ranks(spec: dict[str, Any]) -> int:
    """GPUs a sweep needs (a spec.json's, or a validated spec's): one per tensor-parallel rank or replica."""
    known = {option.name for option in fields(SweepSpec)}
    return world_size(SweepSpec(**{key: value for key, value in spec.items() if key in known}))


def sweep_options(run_id: str, spec: dict[str, Any]) -> dict[str, Any]:
    """What a sweep asks of Ray: one GPU per rank, of the type it was sent to, in one actor, so Ray places
    them all on one node; nothing else counts (num_cpus=0: its host threads are no Ray resource). The actor
    is detached and named after the run, so it outlives the app's driver and a restarted app reattaches
    to it, and never restarted: a sweep cut short is `interrupted`, not run twice."""
    return {"name": run_id, "namespace": NAMESPACE, "lifetime": "detached", "get_if_exists": True,
            "num_gpus": ranks(spec), "accelerator_type": spec["cluster_gpu"], "num_cpus": 0, "max_restarts": 0}


def runtime_env() -> dict[str, Any]:
    """The app's driver's runtime_env: this `runners` package travels to every node a sweep runs on (the
    node brings torch, transformers, pyarrow and nvidia-ml-py). Ray uploads a local folder only for a whole
    job, at ray.init, not per actor."""
    return {"py_modules": [str(Path(runners.__file__).parent)], "excludes": ["__pycache__"]}


class RayBackend:
    """Sweeps as actors on a Ray cluster's GPU nodes; the cluster is joined on first use."""

    queues_itself = True

    def __init__(self, address: str) -> None:
        self.address = address
        self._joining = threading.Lock()
        self._ray: Any = None
        self._host: Any = None
        self._snapshot: Any = None
        self._refused: tuple[float, ClusterError] | None = None  # (when, why) the last join failed
        self._reading = threading.Lock()
        self._types: tuple[float, list[GpuType] | ClusterError] | None = None  # (when, what) of the last reading

    def lane(self, run_id: str, spec: dict[str, Any]) -> str:
        return f"ray:{run_id}"

    def launch(self, run_id: str, folder: Path, spec: dict[str, Any]) -> RaySweep:
        ray = self._joined()
        status = RunFolder(folder).status() or contract.new_status(run_id, "queued", 0)
        try:
            actor = self._host.options(**sweep_options(run_id, spec)).remote(run_id, spec, status)
        except Exception as error:  # a runtime_env Ray cannot ship, a lost connection: the run fails, saying so
            raise LaunchError(f"the Ray cluster refused the sweep: {error}") from None
        return RaySweep(ray, actor, folder)

    def reattach(self, run_id: str, folder: Path, status: dict[str, Any]) -> RaySweep | None:
        ray = self._joined()
        try:
            actor = ray.get_actor(run_id, namespace=NAMESPACE)
        except ValueError:  # no live actor of that name
            return None
        return RaySweep(ray, actor, folder)

    def gone(self, status: dict[str, Any]) -> str:
        return (f"its Ray actor is gone, and with it runner process {status.get('pid')} on "
                f"{status.get('node') or 'its node'} (last heartbeat {status.get('heartbeat_at')})")

    def gpu_types(self, max_age_s: float = TYPES_MAX_AGE_S) -> list[GpuType]:
        """The cluster's GPU types with how many are free, read again when the last reading is older than
        `max_age_s` (the New sweep page asks at every redraw); ClusterError when the cluster does not answer."""
        with self._reading:
            if self._types is None or time.monotonic() - self._types[0] > max_age_s:
                self._types = (time.monotonic(), self._read_types())
            found = self._types[1]
        if isinstance(found, ClusterError):
            raise found
        return found

    def _read_types(self) -> list[GpuType] | ClusterError:
        try:
            ray = self._joined()
        except ClusterError as error:
            return error
        try:
            return gpu_types(*ray.get(self._snapshot.remote(), timeout=CALL_TIMEOUT_S))
        except ray.exceptions.RayError as error:
            return ClusterError(f"the Ray cluster at {self.address} did not answer: {error}")

    def check_placement(self, gpu: str, spec: dict[str, Any]) -> None:
        """SpecError (on the device field) unless some node of the cluster has `gpu` GPUs for every rank."""
        try:
            problem = placement_problem(gpu, ranks(spec), self.gpu_types())
        except ClusterError as error:
            raise SpecError("device", str(error)) from None
        if problem:
            raise SpecError("device", problem)

    def _joined(self) -> Any:
        """The ray module, with this process joined to the cluster (or to the runtime a test started)."""
        with self._joining:
            if self._ray is None:
                if self._refused is not None and time.monotonic() - self._refused[0] < JOIN_RETRY_S:
                    raise self._refused[1]
                try:
                    import ray

                    if not ray.is_initialized():
                        ray.init(address=self.address, namespace=NAMESPACE, runtime_env=runtime_env(),
                                 logging_level=logging.WARNING)
                except Exception as error:  # not installed, no cluster there, a refused connection
                    refused = ClusterError(f"cannot join the Ray cluster at {self.address}: "
                                           f"{type(error).__name__}: {error}")
                    self._refused = (time.monotonic(), refused)
                    raise refused from None

                def free_per_node() -> tuple[list[dict[str, Any]], dict[str, dict[str, float]]]:
                    """Nodes and each one's free resources, read on the cluster (defined in here, Ray ships its
                    code, so a node without batchscope runs it; ray.nodes() alone has no free counts)."""
                    import ray as cluster_ray
                    from ray._private.state import available_resources_per_node

                    return cluster_ray.nodes(), available_resources_per_node()

                self._snapshot = ray.remote(num_cpus=0)(free_per_node)
                self._host = ray.remote(SweepHost)
                self._ray = ray
            return self._ray


class RaySweep:
    """A sweep's actor: polled for the files its runner wrote, written into the app's run folder."""

    def __init__(self, ray: Any, actor: Any, folder: Path) -> None:
        self._ray = ray
        self._actor = actor
        self._folder = folder
        self._received: dict[str, list[int]] = {}  # what the app holds of each node file: (size, mtime)
        self._asking: Any = None  # the poll in flight: it waits in the actor's queue until Ray places it
        self._report: HostReport | None = None  # the latest poll's answer
        self._lost: str | None = None  # why the actor is gone, when it died

    def exited(self) -> bool:
        return self._lost is not None or (self._report is not None and self._report.exit_code is not None)

    def sync(self) -> None:
        """Take in the answer to the poll in flight if it has come, and ask the next one at once, so it is
        answered by the next sync; never waits for the actor (it may be waiting for GPUs)."""
        if self._asking is None:
            self._asking = self._actor.poll.remote(self._received)
        ready, _ = self._ray.wait([self._asking], timeout=0)
        if not ready:
            return
        asked, self._asking = self._asking, None
        try:
            self._take(self._ray.get(asked))
        except self._ray.exceptions.ActorUnavailableError:  # unreachable for now (a network blip): ask again
            pass
        except self._ray.exceptions.RayActorError as error:
            self._lost = str(error).strip().splitlines()[0]
        if not self.exited():
            self._asking = self._actor.poll.remote(self._received)

    def _take(self, report: HostReport) -> None:
        """Write the report's files into the app's folder, status.json naming the node."""
        for name, (signature, content) in report.files.items():
            if Path(name).is_absolute() or ".." in Path(name).parts:
                continue  # only ever inside the run folder
            path = self._folder / name
            path.parent.mkdir(exist_ok=True)
            data = _naming_node(content, report.node) if name == contract.STATUS else content
            contract.write_atomic(path, lambda handle, data=data: handle.write(data))
            self._received[name] = signature
        self._report = report

    def stop(self, force: bool) -> None:
        """While the run is queued (its actor waits for GPUs), taking the actor off Ray's queue is the
        cancel; once its runner started, the actor signals the runner."""
        if self._status().get("state") == "queued":
            self._ray.kill(self._actor, no_restart=True)
        else:
            self._actor.stop.remote(force)

    def ending(self) -> tuple[str, str | None]:
        node = self._status().get("node")
        if self._lost is not None:
            return "interrupted", f"the Ray actor running this sweep{f' on {node}' if node else ''} died: {self._lost}"
        report = self._report
        return exit_outcome(report.exit_code, report.exit_reason, f"runner process {report.pid} on {node}")

    def _status(self) -> dict[str, Any]:
        """The app's copy of status.json: what the app knows of the run, from this process or an earlier one."""
        return RunFolder(self._folder).status() or {}

    def close(self) -> None:
        """Remove the node's copy (the app has every file) and end the actor, which gives its GPUs back."""
        if self._lost is None:
            try:
                self._ray.get(self._actor.discard.remote(), timeout=CALL_TIMEOUT_S)
            except self._ray.exceptions.RayError as error:
                log.warning("the node's copy of %s was not removed: %s", self._folder.name, error)
        self._ray.kill(self._actor, no_restart=True)


def _naming_node(status: bytes, node: str) -> bytes:
    """A status.json from the node with `node` (its host name) added, so the Run page can say where it runs."""
    try:
        record = json.loads(status)
    except ValueError:
        return status  # the app's reader warns about it
    return json.dumps({**record, "node": node}, indent=2).encode() if isinstance(record, dict) else status
