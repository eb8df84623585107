"""The Explain chapter on quantised weights: the full-precision run against quantised-weight runs of the
same workload, and what the accuracy check on these weights says."""
from __future__ import annotations

from typing import Any

from batchscope.analysis.marker import pct
from batchscope.explain import charts
from batchscope.explain.step import Step
from batchscope.explain.told import Told, best, name
from batchscope.explain.words import listed, measured
from batchscope.units import ms, size, tok_s

def quant_chapter(base: Told, quantised: list[Told]) -> Step | None:
    """The full-precision run against quantised-weight runs of the same workload: decode step at batch 1,
    best throughput and where, the OOM batch, and what the accuracy check on these weights says (the title
    claims a move only when a quantised run peaks elsewhere or higher)."""
    told_all = [base] + [told for told in quantised if best(told[1].table) is not None]
    if len(told_all) < 2 or best(base[1].table) is None:
        return None
    labels = {dtype_label(told): told for told in told_all}
    chart = charts.runs_chart({f"{label} ({name(told)})": told[1].table for label, told in labels.items()},
                                      (("output_tokens_per_s", "output tokens/s", False),
                                       ("decode_step_ms", "decode step (ms, log)", True)), legend="weights")
    tops = {label: best(told[1].table) for label, told in labels.items()}
    base_top = tops[dtype_label(base)]
    moved = any(int(top["batch_size"]) != int(base_top["batch_size"])
                or float(top["output_tokens_per_s"]) > float(base_top["output_tokens_per_s"]) for top in tops.values())
    title = "Quantised weights move it again" if moved else "Quantised weights against full precision"
    return Step("quantised", title, chart, (quant_first(labels), quant_second(labels)))


def dtype_label(told: Told) -> str:
    return str(told[0].get("dtype") or (told[0].get("model") or {}).get("dtype") or "?")


def quant_first(labels: dict[str, Told]) -> str:
    """Decode step at the smallest batch all ran, weight bytes, and each run's best throughput."""
    steps = {label: measured(told[1].table, "decode_step_ms") for label, told in labels.items()}
    shared = set.intersection(*(set(s["batch_size"].astype(int)) for s in steps.values()))
    parts = []
    if shared:
        b = min(shared)
        for label, told in labels.items():
            step = steps[label][steps[label]["batch_size"] == b].iloc[0]["decode_step_ms"]
            weights = (told[0].get("model") or {}).get("weight_bytes")
            parts.append(f"{ms(step)} with {label} weights ({size(weights)}, {name(told)})")
        head = f"At batch {b} a decode step, which reads every weight once, takes " + listed(parts)
    else:
        head = "The runs share no batch size with a measured decode step"
    peaks = [f"{label} {tok_s(top['output_tokens_per_s'])} at batch {int(top['batch_size'])}"
             for label, told in labels.items() if (top := best(told[1].table)) is not None]
    return f"{head}; the best throughput is {listed(peaks)}."


def quant_second(labels: dict[str, Told]) -> str:
    """Where each ran out of memory, and the accuracy caveat recorded in each quantised run's model facts."""
    ooms = []
    for label, told in labels.items():
        table = told[1].table
        oom = sorted(int(b) for b in table.loc[table["status"] == "oom", "batch_size"]) if "status" in table else []
        ooms.append(f"{label} at batch {oom[0]}" if oom else f"{label} nowhere it ran")
    checks = [accuracy_words(label, told[0].get("model") or {}) for label, told in labels.items()]
    checks = [c for c in checks if c]
    random = any((told[0].get("model") or {}).get("source") == "preset" for told in labels.values())
    caveat = ("; these are random weights, so this says how much the quantised kernels change this network's "
              "output, not how a trained model's answers would change" if random else "")
    accuracy = (f"; against bfloat16 on the same weights, {listed(checks)}{caveat}" if checks
                else "; no accuracy check was recorded for the quantised runs")
    return f"Memory ran out for {listed(ooms)}: smaller weights leave the KV cache and activations to fill the device{accuracy}."


def accuracy_words(label: str, model: dict[str, Any]) -> str:
    """`fp8 greedy tokens agree on 5–12 % of steps (logits cosine 0.79–0.84)` from model.json's quant_accuracy."""
    checks = model.get("quant_accuracy") or []
    if not checks:
        return ""
    agree = sorted(float(c["token_agreement"]) for c in checks)
    cosine = sorted(float(c["logits_cosine"]) for c in checks)
    span = (lambda xs, fmt: fmt(xs[0]) if xs[0] == xs[-1] else f"{fmt(xs[0])}–{fmt(xs[-1])}")
    return (f"{label} greedy tokens agree on {span(agree, lambda a: pct(a, 0))} of steps "
            f"(logits cosine {span(cosine, lambda c: f'{c:.2f}')})")