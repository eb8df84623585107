"""bench/demo_set.py, the script that re-makes the shipped demo set: every sweep is one the runner accepts,
the shipped folders are what the script's sweeps ask for, and the scheduler (real tiny CPU sweeps) packs,
bounds, holds back and resumes as it says."""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
import time
from pathlib import Path

import pytest

from runners.cli import spec_of_options
from runners.spec.sweep import MEASURE, spec_fields

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "data" / "demo"
_spec = importlib.util.spec_from_file_location("demo_set", REPO / "bench" / "demo_set.py")
demo_set = sys.modules.setdefault("demo_set", importlib.util.module_from_spec(_spec))  # bench/ is no package
_spec.loader.exec_module(demo_set)

MEASURE_KEYS = tuple(f.name for f in spec_fields() if f.group == MEASURE)  # how long a point is measured
SPEC_KEYS = ("model", "dtype", "engine", "mode", "batch_sizes", "prompt_len", "output_len", "repeats", "warmup",
             "seed", "tensor_parallel", "replicas", "max_num_seqs", "arrival", "concurrency", "num_requests",
             "max_num_batched_tokens", "slo_metric", "slo_ms", "calibrate", *MEASURE_KEYS)


def spec_of(sweep) -> dict:
    """The spec the runner would write for this sweep (parsed and validated exactly as `runners sweep` does)."""
    return dataclasses.asdict(spec_of_options(["--name", sweep.label, *sweep.options]))


@pytest.mark.parametrize("sweep", demo_set.SET, ids=lambda s: s.name)
def test_every_sweep_of_the_set_is_a_valid_runner_spec(sweep) -> None:
    spec = spec_of(sweep)
    assert spec["repeats"] == 3 and spec["seed"] == 0
    assert spec["tensor_parallel"] * spec["replicas"] == sweep.gpus
    if sweep.gpus > 1:  # NVLink multicast stays off wherever NCCL runs
        assert sweep.env == demo_set.MULTI_GPU_ENV
    assert sweep.alone == (spec["engine"] == "hf-generate" or spec["mode"] in ("continuous", "endpoint"))


def test_names_are_unique_and_say_what_the_sweep_is() -> None:
    names = [s.name for s in demo_set.SET]
    assert len(set(names)) == len(names)
    for sweep in demo_set.SET:
        spec = spec_of(sweep)
        model = {"llama-3.2-1b": "1b", "llama-3.1-8b": "8b"}[spec["model"]]
        assert f"-{model}-" in sweep.name and ("-chat" in sweep.name) == (spec["output_len"] == demo_set.CHAT[3])


def test_the_served_sweep_is_the_in_process_clients_sweep_sent_over_http() -> None:
    served, clients = (spec_of(demo_set.BY_NAME[n]) for n in ("served-8b-bf16-chat", "cont-8b-bf16-chat-clients"))
    same = ("model", "dtype", "prompt_len", "output_len", "seed", "num_requests", "requests_per_client",
            "max_num_seqs", "max_num_batched_tokens", "repeats", "replays", "slo_metric", "slo_ms")
    assert {k: served[k] for k in same} == {k: clients[k] for k in same}
    assert set(served["concurrency"]) < set(clients["concurrency"]) and max(clients["concurrency"]) == 512
    command = served["server_command"].split()
    assert command[command.index("--port") + 1] in served["url"]
    longest = demo_set.spec_of_options(demo_set.BY_NAME["served-8b-bf16-chat"].options).longest_request(1024)
    assert command[command.index("--max-model-len") + 1] == str(longest)  # no request refused for its length


# Added to the set for issue 37 and not measured yet: each leaves this list in the commit that ships its run folder.
NOT_MADE_YET = {"served-8b-bf16-chat"}
# Shipped runs made before their sweep's options last changed, with the options they were made with; each leaves
# this list in the commit that ships its re-made folder.
MEASURED_ONCE = dict.fromkeys(MEASURE_KEYS)  # made before a point was measured until known: no such options
MADE_WITH_EARLIER_OPTIONS = {
    "cont-8b-bf16-chat-rate": {"num_requests": 64, **MEASURED_ONCE},
    **{name: MEASURED_ONCE for name in ("cont-8b-bf16-chat-seqs", "hf-1b-bf16-chat", "fast-8b-bf16-chat-tp2",
                                        "fast-8b-bf16-chat-rep2", "fast-1b-fp16-chat", "fast-8b-fp16-long",
                                        "fast-1b-fp16-long")},
    # six measured runs at most a point, before static sweeps took up to twelve
    **{name: {"max_draws": 6} for name in ("fast-8b-bf16-chat", "fast-1b-bf16-chat", "fast-1b-bf16-long")},
}


def test_each_shipped_demo_run_is_what_its_sweep_in_the_script_asks_for() -> None:
    made = {p.name.removeprefix("h200-"): p for p in DEMO.iterdir() if (p / "spec.json").is_file()}
    shipped_sweeps = [s for s in demo_set.SET if s.name not in NOT_MADE_YET]
    assert sorted(made) == sorted(s.name for s in shipped_sweeps)  # the whole set ships, and nothing else
    for sweep in shipped_sweeps:
        assert status(made[sweep.name])["state"] == "done", sweep.name  # each ended by itself, not at its bound
        shipped = json.loads((made[sweep.name] / "spec.json").read_text())
        wanted = {**spec_of(sweep), **MADE_WITH_EARLIER_OPTIONS.get(sweep.name, {})}
        assert {k: shipped.get(k) for k in SPEC_KEYS} == {k: wanted[k] for k in SPEC_KEYS}, sweep.name
        assert shipped["name"] == sweep.label


def test_the_demo_folder_stays_small() -> None:
    size = sum(f.stat().st_size for f in DEMO.rglob("*") if f.is_file())
    assert size <= 30 * 1024**2, f"data/demo holds {size / 1024**2:.1f} MiB"


TINY = ("--model", "tiny", "--device", "cpu", "--engine", "fast", "--repeats", "1", "--warmup", "0",
        "--replays", "0", "--target-interval", "0",  # one run a point: the bounds below are timed on it
        "--prompt-len", "fixed:8", "--output-len", "fixed:4", "--no-calibrate")


def status(folder: Path) -> dict:
    return json.loads((folder / "status.json").read_text())


@pytest.mark.alone  # a first point must end inside a 30 s bound
def test_scheduler_runs_side_by_side_holds_back_for_two_gpus_bounds_and_resumes(tmp_path: Path, capsys) -> None:
    sweeps = [
        demo_set.Sweep("one", "one", (*TINY, "--batch-sizes", "1,2"), 120),
        demo_set.Sweep("two", "two", (*TINY, "--batch-sizes", "1"), 120),
        demo_set.Sweep("pair", "pair", (*TINY, "--batch-sizes", "1"), 120, gpus=2),
        # a quick first point, then long ones: a loaded CI host still finishes one before the bound
        demo_set.Sweep("slow", "slow", (*TINY, "--batch-sizes", "1,128,256,512", "--output-len", "fixed:2000"), 30),
        demo_set.Sweep("late", "late", (*TINY, "--batch-sizes", "1"), 10_000),
    ]
    demo_set.run_set(sweeps, tmp_path, gpu_count=2, deadline_s=600, card="cpu")
    folder = {s.name: tmp_path / f"cpu-{s.name}" for s in sweeps}
    one, two, pair = (status(folder[n]) for n in ("one", "two", "pair"))
    assert one["state"] == two["state"] == pair["state"] == "done"
    assert two["started_at"] < one["finished_at"]  # one and two ran side by side, one GPU each
    assert pair["started_at"] > max(one["finished_at"], two["finished_at"])  # the pair waited for both GPUs
    slow = status(folder["slow"])
    assert slow["state"] == "cancelled" and slow["points_done"] >= 1  # SIGTERM at the bound kept finished points
    assert not folder["late"].exists()  # its bound does not fit before the deadline: never started
    out = capsys.readouterr().out
    assert "not started late" in out and "slow: bound reached, SIGTERM" in out
    assert "start pair on GPU 0,1" in out
    before = status(folder["one"])["started_at"]
    demo_set.run_set(sweeps[:1], tmp_path, gpu_count=2, deadline_s=600, card="cpu")  # a done folder is kept, not re-made
    assert status(folder["one"])["started_at"] == before and "keep one: already done" in capsys.readouterr().out


@pytest.mark.alone  # three sweeps inside 300 s
def test_a_host_alone_sweep_has_no_neighbour(tmp_path: Path) -> None:
    sweeps = [demo_set.Sweep("first", "first", (*TINY, "--batch-sizes", "1"), 120),
              demo_set.Sweep("solo", "solo", (*TINY, "--batch-sizes", "1,2"), 120, alone=True),
              demo_set.Sweep("after", "after", (*TINY, "--batch-sizes", "1"), 120)]
    started = time.time()
    demo_set.run_set(sweeps, tmp_path, gpu_count=2, deadline_s=600, card="cpu")
    first, solo, after = (status(tmp_path / f"cpu-{n}") for n in ("first", "solo", "after"))
    assert first["finished_at"] < solo["started_at"] and solo["finished_at"] < after["started_at"]
    assert time.time() - started < 300


def test_a_run_folder_is_named_for_the_card_nvidia_smi_lists() -> None:
    listing = ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-9675e9f5-f440-dd9b-749d-e70436f7aaeb)\n"
               "GPU 1: NVIDIA H200 (UUID: GPU-0b1c)\n"
               "  MIG 3g.40gb     Device  0: (UUID: MIG-5c3e)\n"
               "GPU 2: NVIDIA A100-SXM4-80GB (UUID: GPU-77aa)\n"
               "GPU 3: NVIDIA GeForce RTX 4090 (UUID: GPU-12ef)\n")
    names = demo_set.gpu_names(listing)
    assert names == ["NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A100-SXM4-80GB", "NVIDIA GeForce RTX 4090"]
    assert [demo_set.card_of(n) for n in names] == ["h100", "h200", "a100", "nvidia-geforce-rtx-4090"]


def test_check_describes_each_folder_along_its_own_axis() -> None:
    lines = demo_set.check([DEMO / "h200-fast-8b-bf16-chat", DEMO / "h200-cont-8b-bf16-chat-rate", DEMO / "nothing"])
    assert lines[0].startswith("h200-fast-8b-bf16-chat: done, 7 ok (batch_size [1, 2, 4, 8, 16, 32, 64]), 128: oom")
    assert lines[1].startswith("h200-cont-8b-bf16-chat-rate: done, 4 ok (arrival_rate [4.0, 8.0, 12.0, 16.0])")
    assert lines[2] == "nothing: not made"
