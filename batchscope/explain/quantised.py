"""The Explain chapter on quantised weights: the full-precision run against quantised-weight runs of the
same workload, and what the accuracy check on these weights says."""
from __future__ import annotations

from typing import Any

from batchscope.analysis.marker import pct
from batchscope.analysis.noise import spreads_overlap
from batchscope.explain import charts
from batchscope.explain.partners import head_quantised, is_quantised
from batchscope.explain.step import Step
from batchscope.explain.throughput import stops_at
from batchscope.explain.told import Told, best, name
from batchscope.explain.words import listed, measured
from batchscope.units import ms, size, tok_s

def quant_chapter(base: Told, quantised: list[Told]) -> Step | None:
    """The full-precision run against quantised-weight runs of the same workload: decode step at batch 1,
    best throughput and where, the OOM batch, and what the accuracy check on these weights says (the title
    claims a move only when a quantised run stops paying at another batch, or peaks higher beyond the noise)."""
    told_all = [base] + [told for told in quantised if best(told[1].table) is not None]
    if len(told_all) < 2 or best(base[1].table) is None:
        return None
    labels = {dtype_label(told): told for told in told_all}
    chart = charts.runs_chart({f"{label} ({name(told)})": told[1].table for label, told in labels.items()},
                                      (("output_tokens_per_s", "output tokens/s", False),
                                       ("decode_step_ms", "decode step (ms, log)", True)), legend="weights")
    title = "Quantised weights move it again" if moves(base, quantised) else "Quantised weights against full precision"
    return Step("quantised", title, chart, (quant_first(labels), quant_second(labels)))


def moves(base: Told, quantised: list[Told]) -> bool:
    """Whether a quantised run moves where throughput stops paying, by the same plateau and noise rules
    as step 1 (`throughput.stops_at`), or tops full precision's best beyond the repeats' noise."""
    base_top = best(base[1].table)
    for told in quantised:
        top = best(told[1].table)
        if top is None:
            continue
        if stops_at(told[1].table, told[1]) != stops_at(base[1].table, base[1]):
            return True
        if float(top["output_tokens_per_s"]) > float(base_top["output_tokens_per_s"]) and \
                not spreads_overlap(top, base_top):
            return True
    return False


def dtype_label(told: Told) -> str:
    dtype = str(told[0].get("dtype") or (told[0].get("model") or {}).get("dtype") or "?")
    return f"{dtype} + lm_head" if head_quantised(told[0].get("spec")) else dtype


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
    """Where each ran out of memory, then accuracy as what it is: each quantised matrix product's own error
    against bfloat16 (it means the same on random and trained weights), and the end-to-end greedy agreement
    labelled not meaningful on random weights."""
    ooms = []
    for label, told in labels.items():
        table = told[1].table
        oom = sorted(int(b) for b in table.loc[table["status"] == "oom", "batch_size"]) if "status" in table else []
        ooms.append(f"{label} at batch {oom[0]}" if oom else f"{label} nowhere it ran")
    quantised = {label: told[0].get("model") or {} for label, told in labels.items()
                 if is_quantised(told[0].get("dtype") or (told[0].get("model") or {}).get("dtype"))}
    memory = (f"Memory ran out for {listed(ooms)}: smaller weights leave the KV cache and activations to fill the "
              f"device")
    if not quantised:
        return f"{memory}."
    return f"{memory}; {product_words(quantised)}{end_to_end_words(quantised)}."


def product_words(models: dict[str, dict[str, Any]]) -> str:
    """Each quantised run's per-product error (median and worst), or that the runs predate the measure."""
    found = [f"{label} median {pct(model['quant_layer_error_median'], 2)}, worst "
             f"{pct(model['quant_layer_error_max'], 2)}" for label, model in models.items()
             if model.get("quant_layer_error_median") is not None and model.get("quant_layer_error_max") is not None]
    missing = [label for label, model in models.items() if model.get("quant_layer_error_median") is None]
    said = f"each quantised matrix product's own error against bfloat16 is {listed(found)}" if found else ""
    if missing:
        none = (f"the {listed(missing)} run{'s' if len(missing) > 1 else ''} "
                f"{'predate' if len(missing) > 1 else 'predates'} the per-layer error measure, so "
                f"{'their' if len(missing) > 1 else 'its'} accuracy per matrix product was not recorded")
        said = f"{said}; {none}" if said else none
    return said


def end_to_end_words(models: dict[str, dict[str, Any]]) -> str:
    """The end-to-end check (greedy agreement, logits cosine) of model.json, and on random weights that it
    is not meaningful: near-flat random logits flip their top token on any change."""
    checks = [accuracy_words(label, model) for label, model in models.items()]
    checks = [c for c in checks if c]
    if not checks:
        return ""
    if any(model.get("source") == "preset" for model in models.values()):
        return (f"; end to end, {listed(checks)}, which is not meaningful on these random weights: their logits are "
                f"nearly flat, so any change flips near-tied tokens")
    return f"; end to end against bfloat16 on the same weights, {listed(checks)}"


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
