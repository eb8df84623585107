"""The job manager's Ray backend on a real local Ray runtime: 2 CPUs and 2 declared H200 GPUs (Ray schedules
by declared resources; each sweep is the real runner on the CPU tiny preset). No part of Ray is mocked."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from batchscope.backends.local import runner_alive  # noqa: E402
from batchscope.backends.ray_cluster import NAMESPACE, GpuType, RayBackend, runtime_env, sweep_options  # noqa: E402
from batchscope.jobs import JobManager  # noqa: E402
from batchscope.runfolder import RunFolder  # noqa: E402
from batchscope.store import Store  # noqa: E402
from runners.host import NODE_RUNS  # noqa: E402
from runners.spec import SpecError, validate  # noqa: E402
from tests.runner_helpers import LONG, QUICK, REPO, RUN_TIMEOUT_S, until  # noqa: E402
from tests.test_pages import home, open_page  # noqa: E402,F401 (home: the pages' fresh-history fixture)

GPU = "H200"
ON_CLUSTER = {**QUICK, "cluster_gpu": GPU}
LONG_ON_CLUSTER = {**LONG, "cluster_gpu": GPU}
FINAL = ("done", "failed", "cancelled", "interrupted")


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A local Ray runtime with two declared H200 GPUs on its one node (a real node advertises
    `accelerator_type:H200` the same way), started with the app's runtime_env; yields its address."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("RAY_USAGE_STATS_ENABLED", "0")
        ray.init(num_cpus=2, num_gpus=2, resources={f"accelerator_type:{GPU}": 1}, include_dashboard=False,
                 namespace=NAMESPACE, runtime_env=runtime_env(), log_to_driver=False)
        try:
            yield ray.get_runtime_context().gcs_address
        finally:
            ray.shutdown()


def summaries(manager: JobManager, run_id: str) -> int:
    return len(RunFolder(manager.runs_dir / run_id).complete_points())


def free_gpus(backend: RayBackend) -> list[GpuType]:
    return backend.gpu_types(max_age_s=0)


def test_without_the_setting_the_app_never_imports_ray(tmp_path: Path) -> None:
    code = ("import sys\n"
            "from batchscope.jobs import JobManager\n"
            "import batchscope.backends.ray_cluster, batchscope.ui.resources, batchscope.ui.form_state\n"
            "manager = JobManager.instance(sys.argv[1], sys.argv[2])\n"
            "print(manager.cluster, sorted(m for m in sys.modules if m.split('.')[0] == 'ray'))\n"
            "manager.shutdown()\n")
    env = {k: v for k, v in os.environ.items() if k != "BATCHSCOPE_RAY_ADDRESS"}
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "h.duckdb"), str(tmp_path / "runs")], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "None []", done.stdout + done.stderr


UNREACHABLE = """
import json, sys, time
from pathlib import Path
from batchscope.jobs import JobManager
from runners.results.contract import new_status, write_json
from runners.spec import SpecError
left = Path(sys.argv[2]) / "20261130-090000-left-on-the-cluster"
left.mkdir(parents=True)
write_json(left / "spec.json", {**json.loads(sys.argv[3]), "run_id": left.name})
write_json(left / "status.json", new_status(left.name, "running", 2, pid=4242, started_at="2026-11-30T09:00:00Z"))
manager = JobManager.instance(sys.argv[1], sys.argv[2])
answers = []
for _ in range(2):
    started = time.monotonic()
    try:
        manager.submit(json.loads(sys.argv[3]))
    except SpecError as error:
        answers.append([error.field, error.message.split(":")[0], round(time.monotonic() - started, 1)])
left_state = json.loads((left / "status.json").read_text())["state"]
print(json.dumps({"answers": answers, "runs": len(manager.store.runs()), "left": left_state}))
manager.shutdown()
"""


def test_a_cluster_that_does_not_answer_leaves_its_runs_be_and_refuses_new_ones(tmp_path: Path) -> None:
    """`auto` with no Ray instance to find (an empty Ray temp folder): a run an earlier app left on the
    cluster stays `running` for an app that can reach it (not `interrupted`: its points may still be
    there), a new sweep is refused on the device field with nothing written, and the second try does not
    wait for another join."""
    env = {**os.environ, "BATCHSCOPE_RAY_ADDRESS": "auto", "RAY_TMPDIR": str(tmp_path / "ray-tmp")}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run([sys.executable, "-c", UNREACHABLE, str(tmp_path / "h.duckdb"), str(tmp_path / "runs"),
                           json.dumps(ON_CLUSTER)], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.splitlines()[-1])
    assert [field for field, _, _ in answer["answers"]] == ["device", "device"]
    assert {words for _, words, _ in answer["answers"]} == {"cannot join the Ray cluster at auto"}
    assert answer["answers"][1][2] == 0.0 and answer["runs"] == 0 and answer["left"] == "running"
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["20261130-090000-left-on-the-cluster"]


def test_a_tp2_request_asks_ray_for_two_gpus_of_its_type_in_one_actor() -> None:
    tp2 = validate({**QUICK, "engine": "fast", "tensor_parallel": 2}).to_dict()
    options = sweep_options("run-tp2", {**tp2, "cluster_gpu": GPU})
    assert options == {"name": "run-tp2", "namespace": NAMESPACE, "lifetime": "detached", "get_if_exists": True,
                       "num_gpus": 2, "accelerator_type": GPU, "num_cpus": 0, "max_restarts": 0}
    replicas = validate({**QUICK, "replicas": 3, "batch_sizes": [4]}).to_dict()
    assert sweep_options("run-r3", {**replicas, "cluster_gpu": "A100"})["num_gpus"] == 3
    assert sweep_options("run-1", {**validate(QUICK).to_dict(), "cluster_gpu": "L4"})["num_gpus"] == 1


def test_a_tp2_request_waits_in_rays_queue_until_two_gpus_of_one_node_are_free(cluster: str, tmp_path: Path) -> None:
    @ray.remote
    class Probe:
        """Stands where a sweep's actor would, with a sweep's options, and says which GPUs Ray gave it (defined
        in here, Ray ships its code: a worker need not import this test module)."""

        def gpus(self) -> list[int]:
            import ray as worker_ray

            return [int(gpu) for gpu in worker_ray.get_gpu_ids()]

    backend = RayBackend(cluster)
    assert free_gpus(backend) == [GpuType(GPU, total=2, free=2, free_on_one_node=2, per_node=2)]
    one = {**validate(QUICK).to_dict(), "cluster_gpu": GPU}
    tp2 = {**validate({**QUICK, "engine": "fast", "tensor_parallel": 2}).to_dict(), "cluster_gpu": GPU}
    probes = [Probe.options(**sweep_options(f"probe-{n}", spec)).remote()
              for n, spec in enumerate((one, tp2, {**one, "cluster_gpu": "A100"}))]
    holder, pair, elsewhere = probes
    manager = JobManager(Store(tmp_path / "history.duckdb"), tmp_path / "runs", ingest_every_s=0.25, cluster=backend)
    try:
        assert len(ray.get(holder.gpus.remote(), timeout=60)) == 1
        assert free_gpus(backend) == [GpuType(GPU, total=2, free=1, free_on_one_node=1, per_node=2)]
        waiting = manager.submit({**ON_CLUSTER, "engine": "fast", "tensor_parallel": 2})
        asked = pair.gpus.remote()
        assert ray.wait([asked], timeout=1)[0] == []  # one GPU free: the pair waits, and so does the sweep
        assert free_gpus(backend)[0].free == 1 and manager.progress(waiting)["state"] == "queued"
        manager.cancel(waiting)  # it leaves Ray's queue: no runner ever starts
        assert manager.wait(waiting, 30) == "cancelled"
        assert sorted(p.name for p in (manager.runs_dir / waiting).iterdir()) == ["spec.json", "status.json"]
        assert not (NODE_RUNS / waiting).exists()
        ray.kill(holder)
        assert sorted(ray.get(asked, timeout=60)) == [0, 1]  # both, to one process of the one node
        assert free_gpus(backend) == [GpuType(GPU, total=2, free=0, free_on_one_node=0, per_node=2)]
        assert ray.wait([elsewhere.gpus.remote()], timeout=0.5)[0] == []  # no A100 node: never placed
    finally:
        manager.shutdown()
        for probe in probes:
            ray.kill(probe)
    until(lambda: free_gpus(backend)[0].free == 2, timeout=10, what="the probes' GPUs to come back")
    backend.check_placement(GPU, tp2)  # a node has two: Ray may queue it, and it will fit
    with pytest.raises(SpecError, match=r"^device: the Ray cluster has no A100 GPU \(it has: H200\)$"):
        backend.check_placement("A100", one)
    three = validate({**QUICK, "replicas": 3, "batch_sizes": [4]}).to_dict()
    with pytest.raises(SpecError, match="^device: 3 ranks need 3 H200 GPUs on one node; the cluster's largest "
                                        "H200 node has 2$"):
        backend.check_placement(GPU, three)


@dataclass
class Moment:
    """What the app showed of each sweep at one look: state, points the runner reported, points in the DB."""

    states: tuple[str, ...]
    done: tuple[int, ...]
    stored: tuple[int, ...]


@dataclass
class ClusterDay:
    """What happened to three sweeps on the two GPUs (see the `day` fixture), and the manager that saw it."""

    manager: JobManager
    watched: str
    cancelled: str
    killed: str
    left_at: tuple[int, ...]  # each sweep's points in the DB when the first app exited
    reattached: list[str]
    seen: list[Moment]
    cancelled_pid: int = 0
    killed_pid: int = 0


FIRST_APP = """
import json, sys, time
from batchscope.jobs import JobManager
manager = JobManager.instance(sys.argv[1], sys.argv[2])
runs = [manager.submit(spec) for spec in json.loads(sys.argv[3])]
def going():
    return [run_id for run_id in runs if manager.progress(run_id)["state"] == "running"]
while len(going()) < 2 or not any(manager.store.point_indices(run_id) for run_id in runs):
    time.sleep(0.05)
print(json.dumps({run_id: len(manager.store.point_indices(run_id)) for run_id in runs}), flush=True)
manager.shutdown(cancel_running=False)
"""


def look(manager: JobManager, runs: tuple[str, ...]) -> tuple[Moment, list[dict]]:
    progress = [manager.progress(run_id) for run_id in runs]
    return Moment(tuple(p["state"] for p in progress), tuple(p["points_done"] for p in progress),
                  tuple(len(manager.store.point_indices(run_id)) for run_id in runs)), progress


@pytest.fixture(scope="module")
def day(cluster: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterDay]:
    """Three sweeps sent at once to the two GPUs by a first app, a Ray driver in a process of its own, which
    exits once two of them run and a point is stored (its driver gone: only detached actors live on). The
    app is started again here on the same history and runs folder, and watches until all three settle:
    one runs to the end, one is cancelled once it has a point, and the Ray worker of the third is killed
    once it has one (whichever of the last two waited for a GPU starts when the other gives its back).
    The tests below read what was seen, so one start-up of three runners serves them all."""
    folder = tmp_path_factory.mktemp("cluster-day")
    paths = (folder / "history.duckdb", folder / "runs")
    specs = [{**LONG_ON_CLUSTER, "batch_sizes": [1, 2, 4, 8, 16, 32], "name": "watched"},
             {**LONG_ON_CLUSTER, "name": "cancelled"}, {**LONG_ON_CLUSTER, "name": "killed"}]
    first = subprocess.run([sys.executable, "-c", FIRST_APP, *map(str, paths), json.dumps(specs)], cwd=REPO,
                           env={**os.environ, "BATCHSCOPE_RAY_ADDRESS": cluster}, capture_output=True, text=True,
                           timeout=RUN_TIMEOUT_S)
    assert first.returncode == 0, first.stderr
    left = json.loads(first.stdout)
    runs = tuple(left)
    manager = JobManager(Store(paths[0]), paths[1], ingest_every_s=0.25, cluster=RayBackend(cluster))
    manager.recover()  # as JobManager.instance() does on an app's first use (the first app went through it)
    record = ClusterDay(manager, *runs, tuple(left.values()), manager.active(), [])
    deadline = time.monotonic() + 2 * RUN_TIMEOUT_S
    while not all(manager.progress(run_id)["settled"] and manager.progress(run_id)["state"] in FINAL
                  for run_id in runs):
        assert time.monotonic() < deadline, record.seen[-1:]
        moment, progress = look(manager, runs)
        record.seen.append(moment)
        if not record.cancelled_pid and moment.states[1] == "running" and moment.done[1]:
            record.cancelled_pid = progress[1]["pid"]
            manager.cancel(record.cancelled)
        if not record.killed_pid and moment.states[2] == "running" and moment.stored[2]:
            record.killed_pid = progress[2]["pid"]
            worker = int(Path(f"/proc/{record.killed_pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            os.kill(worker, signal.SIGKILL)  # the runner's parent: the actor's Ray worker process
        time.sleep(0.05)
    yield record
    manager.shutdown()
    shutil.rmtree(NODE_RUNS / record.killed, ignore_errors=True)  # a dead actor's node copy stays behind


def test_a_restarted_app_reattaches_to_its_sweeps_on_the_cluster(day: ClusterDay) -> None:
    assert sorted(day.reattached) == sorted([day.watched, day.cancelled, day.killed])
    assert sorted(day.seen[0].states) == ["queued", "running", "running"]  # one still waits in Ray's queue
    assert day.left_at[0] < 6  # the first app left mid-sweep
    assert day.manager.store.run(day.watched)["state"] == "done"


def test_a_cluster_sweep_brings_its_points_into_the_db_while_it_runs(day: ClusterDay) -> None:
    manager, run_id = day.manager, day.watched
    assert any(m.states[0] == "running" and day.left_at[0] < m.stored[0] <= m.done[0] < 6 for m in day.seen)
    run = manager.store.run(run_id)
    assert list(manager.store.points([run_id])["batch_size"]) == [1, 2, 4, 8, 16, 32]
    assert run["host"] == os.uname().nodename and run["status"]["node"] == os.uname().nodename
    assert sorted(p.name for p in (manager.runs_dir / run_id).iterdir()) == [
        "env.json", "log.txt", "model.json", "points", "spec.json", "status.json"]
    assert not (NODE_RUNS / run_id).exists()  # the node's copy is gone once the app has it all
    with pytest.raises(ValueError):
        ray.get_actor(run_id, namespace=NAMESPACE)  # and the actor with it, so its GPU is free again


def test_cancel_stops_the_runner_on_its_node_keeping_its_points(day: ClusterDay) -> None:
    manager, run_id = day.manager, day.cancelled
    run = manager.store.run(run_id)
    assert (run["state"], run["error"]) == ("cancelled", None)
    stored = manager.store.point_indices(run_id)
    assert 1 <= len(stored) == summaries(manager, run_id) < len(LONG["batch_sizes"])
    assert day.cancelled_pid and not runner_alive(day.cancelled_pid)
    assert not (NODE_RUNS / run_id).exists()


def test_a_killed_ray_worker_leaves_the_run_interrupted_with_the_points_that_came_back(day: ClusterDay) -> None:
    manager, run_id = day.manager, day.killed
    run = manager.store.run(run_id)
    assert run["state"] == "interrupted"
    assert run["error"].startswith(f"the Ray actor running this sweep on {os.uname().nodename} died: ")
    stored = manager.store.point_indices(run_id)
    assert 1 <= len(stored) == summaries(manager, run_id) < len(LONG["batch_sizes"])
    assert day.killed_pid
    until(lambda: not runner_alive(day.killed_pid), timeout=10, what="the runner to die with its actor")


def test_three_sweeps_on_two_gpus_run_two_at_a_time(day: ClusterDay) -> None:
    manager, runs = day.manager, (day.watched, day.cancelled, day.killed)
    assert not any(m.states.count("running") == 3 for m in day.seen)
    spans = sorted((manager.store.run(r)["status"]["started_at"], manager.store.run(r)["status"]["finished_at"])
                   for r in runs)
    assert spans[1][0] < spans[0][1]  # the first two ran side by side
    assert spans[2][0] >= min(spans[0][1], spans[1][1])  # the third began when a GPU came back


def test_new_sweep_offers_the_clusters_gpu_types_with_their_free_counts(
        cluster: str, home: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BATCHSCOPE_RAY_ADDRESS", cluster)
    at = open_page("app_pages/new_sweep.py")
    device = at.selectbox(key="device")
    assert device.options == ["auto", "cuda", "cpu", "H200 on the Ray cluster: 2 of 2 free"]
    device.set_value("ray:H200").run()
    assert not at.exception and not at.error, [e.value for e in at.exception] + [e.value for e in at.error]
    assert at.button(key="launch").disabled is False
