"""The Explain walk's cross-run chapters: which stored runs they use (batchscope.explain.partners), what they
say on hand-made tables (continuous, quantised, parallel), and the default walk over the shipped H200 demo runs."""
from __future__ import annotations

import pandas as pd
import pytest

from batchscope.explain import continuous, parallel, partners, quantised
from batchscope.explain.told import Told
from batchscope.analysis import SLO, analyse
from batchscope.units import tok_s
from batchscope.explain.words import measured
from batchscope.explain.charts import resize
from batchscope.store import Store
from batchscope.ui import explain_view
from batchscope.ui.run_view import load_run

GiB = 1024**3
CHAT = {"prompt_len": "lognormal:512:0.6", "output_len": "lognormal:256:0.5"}


def static_points(batches: list[int], **columns: list) -> pd.DataFrame:
    return pd.DataFrame({"batch_size": batches, "status": ["ok"] * len(batches), **columns})


# ---- which runs a chapter uses ----

RUNS = pd.DataFrame({
    "run_id": ["base", "cont", "fp8", "int8", "tp", "rep", "long", "fp8-old"],
    "engine": ["fast"] * 8, "model": ["m"] * 8,
    "dtype": ["bfloat16", "bfloat16", "fp8", "int8", "bfloat16", "bfloat16", "bfloat16", "fp8"],
    "state": ["done"] * 7 + ["cancelled"], "points_ok": [7, 3, 7, 7, 4, 4, 5, 9]})
SPECS = {"base": {**CHAT}, "cont": {**CHAT, "mode": "continuous"}, "fp8": {**CHAT}, "int8": {**CHAT},
         "tp": {**CHAT, "tensor_parallel": 2}, "rep": {**CHAT, "replicas": 2},
         "long": {"prompt_len": "lognormal:8192:0.3", "output_len": "fixed:256"}, "fp8-old": {**CHAT}}
BASE = {"run_id": "base", "engine": "fast", "model_name": "m", "dtype": "bfloat16", "spec": SPECS["base"]}


def test_partners_share_model_dtype_lengths_and_differ_in_one_thing() -> None:
    assert partners.continuous_partners(BASE, RUNS, SPECS.get) == ["cont"]
    # fp8: the done run before the cancelled one with more points
    assert partners.quantised_partners(BASE, RUNS, SPECS.get) == ["fp8", "int8"]
    assert partners.parallel_partners(BASE, RUNS, SPECS.get) == ("tp", "rep")
    long = {**BASE, "run_id": "long", "spec": SPECS["long"]}  # other lengths: nothing to set beside it
    assert partners.continuous_partners(long, RUNS, SPECS.get) == [] and partners.quantised_partners(long, RUNS, SPECS.get) == []
    fp8 = {**BASE, "run_id": "fp8", "dtype": "fp8"}
    assert partners.quantised_partners(fp8, RUNS, SPECS.get) == []  # the chapter starts from full precision
    tp = {**BASE, "run_id": "tp", "spec": SPECS["tp"]}
    assert partners.parallel_partners(tp, RUNS, SPECS.get) == (None, None)
    assert partners.continuous_partners(tp, RUNS, SPECS.get) == []  # a one-GPU continuous run is no match for TP=2


def test_a_run_that_quantised_lm_head_too_is_not_the_plain_int8_run_and_says_so() -> None:
    runs = pd.concat([RUNS, pd.DataFrame({"run_id": ["int8-head"], "engine": ["fast"], "model": ["m"],
                                          "dtype": ["int8"], "state": ["done"], "points_ok": [9]})])
    specs = {**SPECS, "int8-head": {**CHAT, "quantize_lm_head": True}}
    assert partners.quantised_partners(BASE, runs, specs.get) == ["fp8", "int8"]  # more points, other weights
    head = {**BASE, "run_id": "int8-head", "dtype": "int8", "spec": specs["int8-head"]}
    assert partners.siblings(head, runs, specs.get) == []  # the plain int8 run quantised less
    assert quantised.dtype_label((head, None)) == "int8 + lm_head"
    assert quantised.dtype_label(({**head, "spec": SPECS["int8"]}, None)) == "int8"


# ---- a. continuous batching ----

def continuous_runs(slo: SLO) -> tuple[Told, Told]:
    static = static_points([1, 2, 4], output_tokens_per_s=[100.0, 180.0, 200.0], ttft_ms_p95=[50.0, 300.0, 900.0])
    online = pd.DataFrame({"batch_size": [4, 4], "status": "ok", "sweep_axis": "max_num_seqs",
                           "sweep_value": [8.0, 16.0], "output_tokens_per_s": [300.0, 320.0],
                           "ttft_ms_p95": [800.0, 200.0], "queue_ms_p95": [700.0, 20.0],
                           "goodput_rps": [1.0, 3.0], "requests_per_s": [2.0, 3.0], "goodput_slo": "ttft<=500ms"})
    return (({"run_id": "static"}, analyse(static, None, None, slo)),
            ({"run_id": "online", "spec": {"arrival": "poisson:8"}}, analyse(online, None, None)))


def test_continuous_chapter_compares_the_best_under_the_slo_and_says_why_a_point_misses() -> None:
    slo = SLO("ttft", 95, 500.0)
    static, online = continuous_runs(slo)
    step = continuous.continuous_chapter(static, [online], slo)
    assert step is not None and step.key == "continuous" and step.title == "Continuous batching moves the knee"
    # static: batch 2 is the best that meets 500 ms (180 tok/s); online: max_num_seqs 16 (320 tok/s) → 320/180 = 1.8×
    assert step.sentences[0] == (
        "Under a P95 TTFT SLO of 500 ms, static batching (static) does best within it at batch 2: 180 tok/s at 300 ms "
        "(its throughput is best at batch 4, 200 tok/s, where it takes 900 ms); continuous batching of the same "
        "workload (online, Poisson 8 req/s) does best within it at max_num_seqs 16: 320 tok/s at 200 ms, 1.8× the "
        "static throughput under the same SLO.")
    assert step.sentences[1].endswith(
        "online's knee is at max_num_seqs 8 (plateau), and max_num_seqs 8 misses the SLO (800 ms) because requests "
        "wait for a free slot (P95 queue wait 700 ms).")
    assert "ttft<=500ms" not in " ".join(step.sentences)  # the run's own goodput SLO is a second one: never told
    assert continuous.continuous_chapter(static, [online], None) is None  # no SLO set: none is borrowed
    assert continuous.continuous_chapter(static, [], slo) is None
    tight = SLO("ttft", 95, 10.0)
    nowhere = continuous.continuous_chapter(static, [online], tight)
    assert "static batching (static) meets it nowhere: even batch 1 takes 50 ms" in nowhere.sentences[0]
    assert nowhere.title == "Continuous vs static batching under the same SLO"  # neither meets it: no move claimed


def test_a_missed_point_names_what_its_queued_requests_waited_for() -> None:
    point = lambda **columns: pd.Series({"admission_waits": 0, **columns})  # noqa: E731
    assert continuous.what_held_back(point(admission_waits=3, concurrency=8, max_num_seqs=16)) == "KV cache blocks"
    # 64 closed-loop clients and 512 slots: every client holds a slot, so only the step's prompt-token budget is left
    assert continuous.what_held_back(point(concurrency=64, max_num_seqs=512)) == "their turn at prefill"
    assert continuous.what_held_back(point(concurrency=64, max_num_seqs=32)) == "a free slot"
    assert continuous.what_held_back(point(concurrency=None, max_num_seqs=16)) == "a free slot"  # Poisson arrivals


# ---- b. quantised weights ----

def quant_runs() -> tuple[Told, Told]:
    oom = {"batch_size": 8, "status": "oom"}
    bf16 = pd.concat([static_points([1, 2, 4], decode_step_ms=[5.0, 5.5, 7.0], output_tokens_per_s=[100.0, 180.0, 150.0]),
                      pd.DataFrame([oom])], ignore_index=True)
    fp8 = pd.concat([static_points([1, 2, 4], decode_step_ms=[3.5, 4.0, 6.0], output_tokens_per_s=[140.0, 250.0, 260.0]),
                     pd.DataFrame([oom])], ignore_index=True)
    checks = [{"kernel": "triton", "rows": 4, "logits_cosine": 0.84, "token_agreement": 0.12},
              {"kernel": "scaled_mm", "rows": 20, "logits_cosine": 0.79, "token_agreement": 0.05}]
    return (({"run_id": "b", "dtype": "bfloat16", "model": {"weight_bytes": 16 * GiB, "source": "preset"}},
             analyse(bf16, None, None)),
            ({"run_id": "q", "dtype": "fp8", "model": {"weight_bytes": 9 * GiB, "source": "preset",
                                                       "quant_accuracy": checks}}, analyse(fp8, None, None)))


def test_quant_chapter_decode_step_best_throughput_oom_and_the_accuracy_caveat() -> None:
    base, fp8 = quant_runs()
    step = quantised.quant_chapter(base, [fp8])
    assert step is not None and step.title == "Quantised weights move it again"
    assert step.sentences[0] == (
        "At batch 1 a decode step, which reads every weight once, takes 5 ms with bfloat16 weights (16.0 GiB, b) and "
        "3.5 ms with fp8 weights (9.0 GiB, q); the best throughput is bfloat16 180 tok/s at batch 2 and fp8 "
        "260 tok/s at batch 4.")
    assert step.sentences[1] == (
        "Memory ran out for bfloat16 at batch 8 and fp8 at batch 8: smaller weights leave the KV cache and "
        "activations to fill the device; the fp8 run predates the per-layer error measure, so its accuracy per "
        "matrix product was not recorded; end to end, fp8 greedy tokens agree on 5 %–12 % of steps (logits cosine "
        "0.79–0.84), which is not meaningful on these random weights: their logits are nearly flat, so any change "
        "flips near-tied tokens.")
    measured_fp8 = ({**fp8[0], "model": {**fp8[0]["model"], "quant_layer_error_median": 0.009,
                                         "quant_layer_error_max": 0.0097}}, fp8[1])
    assert quantised.quant_chapter(base, [measured_fp8]).sentences[1].split("; ")[1] == \
        "each quantised matrix product's own error against bfloat16 is fp8 median 0.9 %, worst 0.97 %"
    assert quantised.quant_chapter(base, []) is None
    same = (fp8[0], analyse(base[1].table.assign(decode_step_ms=[3.5, 4.0, 6.0, None]), None, None))
    assert quantised.quant_chapter(base, [same]).title == "Quantised weights against full precision"


# ---- c. two GPUs ----

def test_parallel_chapter_who_wins_at_small_and_large_batch_and_memory_per_gpu() -> None:
    one = static_points([1, 4, 16], output_tokens_per_s=[100.0, 300.0, 500.0], itl_ms_p95=[5.0, 6.0, 10.0],
                        ttft_ms_p95=[10.0, 50.0, 400.0], mem_nvml_used=[20 * GiB, 24 * GiB, 60 * GiB])
    tp = static_points([1, 4, 16], output_tokens_per_s=[150.0, 350.0, 450.0], itl_ms_p95=[4.0, 4.5, 8.0],
                       ttft_ms_p95=[8.0, 40.0, 450.0], mem_nvml_used=[12 * GiB, 14 * GiB, 35 * GiB])
    rep = static_points([4, 16], output_tokens_per_s=[280.0, 700.0], itl_ms_p95=[5.5, 7.0],
                        ttft_ms_p95=[30.0, 200.0], mem_nvml_used=[22 * GiB, 40 * GiB])
    told = [({"run_id": rid}, analyse(table, None, None)) for rid, table in (("one", one), ("tp", tp), ("rep", rep))]
    step = parallel.parallel_chapter(*told)
    assert step is not None and step.title == "Two GPUs: tensor parallel vs replicas"
    assert step.sentences[0] == ("At batch 4 the most throughput comes from tensor parallel ×2 (350 tok/s, P95 ITL "
                                 "4.5 ms), against one GPU (300 tok/s, P95 ITL 6 ms) and 2 replicas (280 tok/s, "
                                 "P95 ITL 5.5 ms).")
    assert step.sentences[1] == ("At batch 16 the most throughput comes from 2 replicas (700 tok/s, P95 ITL 7 ms), "
                                 "against one GPU (500 tok/s, P95 ITL 10 ms) and tensor parallel ×2 (450 tok/s, "
                                 "P95 ITL 8 ms); memory in use on each GPU there: 60.0 GiB for one GPU (one), "
                                 "35.0 GiB for tensor parallel ×2 (tp) and 40.0 GiB for 2 replicas (rep).")
    assert parallel.parallel_chapter(told[0], None, None) is None


# ---- the shipped demo runs ----

def demo_walk(store: Store, run_id: str, slo: SLO) -> list:
    return explain_view.walk(load_run(store, run_id, slo), store.runs(), lambda rid: load_run(store, rid, None),
                             lambda rid: (store.run(rid) or {}).get("spec"), slo)


def test_the_default_walk_makes_the_case_with_all_three_chapters(demo_store: Store) -> None:
    slo = SLO("ttft", 95, 1000.0)
    chosen = explain_view.default_run(demo_store.runs(), lambda rid: load_run(demo_store, rid, None))
    steps = demo_walk(demo_store, chosen, slo)
    assert [s.key for s in steps] == ["throughput", "latency", "utilisation", "memory", "roofline", "working_point",
                                      "continuous", "quantised", "parallel"]
    curve = measured(load_run(demo_store, chosen, None).table, "output_tokens_per_s")
    peak = curve.loc[curve["output_tokens_per_s"].idxmax()]
    last = curve.iloc[-1]
    assert int(peak["batch_size"]) < int(last["batch_size"])  # the data itself peaks before the largest batch
    first = steps[0]
    # measured until known, batch 32 reads 1 107 tok/s and batch 64 984 (11.1 % less), each within ± 5 %: the
    # fall is beyond both intervals, so it is claimed, with the static batch's reasons (finished rows, padding)
    assert first.title == f"Throughput peaks at batch {int(peak['batch_size'])}, then falls"
    assert first.sentences[1].startswith(
        f"Past its peak at batch {int(peak['batch_size'])} it falls: batch {int(last['batch_size'])} gives "
        f"{tok_s(last['output_tokens_per_s'])}, ")
    assert "requests already finished" in first.sentences[1] and "padding" in first.sentences[1]
    named = {"continuous": ("8B continuous · chat · bf16 · max_num_seqs at 8 req/s",
                            "8B continuous · chat · bf16 · arrival rate, 64 slots",
                            "8B continuous · chat · bf16 · concurrency 1…512, 512 slots"),
             "quantised": ("8B fast · chat · fp8", "8B fast · chat · int8"),
             "parallel": ("8B fast · chat · bf16 · tensor parallel over 2 GPUs", "8B fast · chat · bf16 · 2 replicas on 2 GPUs")}
    for step in steps[6:]:
        said = " ".join(step.sentences)
        assert all(name in said for name in named[step.key]), (step.key, said)
        assert "h200-" not in said, (step.key, said)  # names, never run ids
        assert len(step.sentences) == 2 and all(s.endswith(".") for s in step.sentences)


def test_every_chart_of_the_default_walk_resizes(demo_store: Store) -> None:
    slo = SLO("ttft", 95, 1000.0)
    chosen = explain_view.default_run(demo_store.runs(), lambda rid: load_run(demo_store, rid, None))
    for step in demo_walk(demo_store, chosen, slo):
        spec = resize(step.chart, 880, 440).to_dict()
        panels = spec.get("hconcat", [spec])
        assert all(p["height"] == 440 for p in panels), step.key
        assert sum(p["width"] for p in panels) <= 880, step.key
        assert spec["config"]["axis"]["titleFontSize"] == 15, step.key


def test_runs_without_partners_or_along_another_axis_get_no_chapters(demo_store: Store) -> None:
    slo = SLO("ttft", 95, 1000.0)
    for run_id in ("h200-fast-1b-bf16-chat", "h200-cont-8b-bf16-chat-rate", "h200-fast-8b-bf16-chat-tp2"):
        keys = [s.key for s in demo_walk(demo_store, run_id, slo)]
        assert not {"continuous", "quantised", "parallel"} & set(keys), (run_id, keys)
