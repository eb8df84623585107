"""Explain step 3, utilisation: where NVML busy-time saturates against where throughput peaks, what the
GPM counters say there, and a CPU run's own numbers instead."""
from __future__ import annotations

from typing import Any

import pandas as pd

from batchscope.explain.words import measured, not_ok_words, times, value
from batchscope.units import pct_value, size, tok_s

BUSY_PCT = 90.0  # NVML busy-time at or above this counts as "saturated"
GPM_COUNTERS = (("sm_util_pct", "the SMs are active"), ("tensor_active_pct", "the tensor cores"),
                ("dram_bw_util_pct", "DRAM bandwidth is"))
GPM_SUFFIX = {"sm_util_pct": " of the time", "tensor_active_pct": "", "dram_bw_util_pct": " used"}


def utilisation_title(table: pd.DataFrame) -> str:
    """The step's title names the device whose utilisation the chart draws."""
    if measured(table, "gpu_util_pct").empty:
        return "Utilisation: the CPU's share vs throughput (no GPU recorded)"
    return "Utilisation: GPU busy-time vs throughput"


def utilisation_sentences(run: dict[str, Any], table: pd.DataFrame) -> tuple[str, str]:
    """Where NVML busy-time first reaches 90 % vs the best-throughput batch; what GPM says there."""
    busy = measured(table, "gpu_util_pct")
    if busy.empty:
        return cpu_sentences(run, table)
    curve = measured(table, "output_tokens_per_s")
    if curve.empty:
        top = busy.loc[busy["gpu_util_pct"].idxmax()]
        return (f"GPU busy-time (NVML) reaches {pct_value(top['gpu_util_pct'])} at batch {int(top['batch_size'])}, "
                f"but no batch recorded a throughput to compare it with.", not_ok_words(table))
    best = curve.loc[curve["output_tokens_per_s"].idxmax()]
    bb, tb = int(best["batch_size"]), float(best["output_tokens_per_s"])
    saturated = busy[busy["gpu_util_pct"] >= BUSY_PCT]
    if saturated.empty:
        top = busy.loc[busy["gpu_util_pct"].idxmax()]
        first = (f"GPU busy-time (NVML) never reaches {BUSY_PCT:.0f} %: its highest is "
                 f"{pct_value(top['gpu_util_pct'])} at batch {int(top['batch_size'])}, while throughput peaks at "
                 f"batch {bb} ({tok_s(tb)}).")
    else:
        sat = saturated.iloc[0]
        bs = int(sat["batch_size"])
        if bs < bb:
            at_sat = curve[curve["batch_size"] == bs]
            gain = (f", {times(tb / float(at_sat.iloc[0]['output_tokens_per_s']))} what batch {bs} gave"
                    if not at_sat.empty else "")
            first = (f"GPU busy-time (NVML) first reaches {BUSY_PCT:.0f} % at batch {bs} "
                     f"({pct_value(sat['gpu_util_pct'])}), yet throughput goes on to its best median at batch {bb} "
                     f"({tok_s(tb)}{gain}): busy-time only says some kernel was running, not how much of the GPU it used.")
        elif bs == bb:
            first = (f"GPU busy-time (NVML) reaches {BUSY_PCT:.0f} % at batch {bs} "
                     f"({pct_value(sat['gpu_util_pct'])}), the same batch where throughput peaks ({tok_s(tb)}).")
        else:
            first = (f"Throughput peaks at batch {bb} ({tok_s(tb)}) before GPU busy-time (NVML) reaches "
                     f"{BUSY_PCT:.0f} % at batch {bs} ({pct_value(sat['gpu_util_pct'])}).")
    return first, gpm_sentence(best)


def gpm_sentence(point: pd.Series) -> str:
    """What SM, tensor and DRAM activity (GPM) say at one point, or that they were not recorded."""
    b = int(point["batch_size"])
    found = {column: value(point, column) for column, _ in GPM_COUNTERS}
    found = {c: v for c, v in found.items() if v is not None}
    if not found:
        busy = value(point, "gpu_util_pct")
        reads = f"; there it reads {pct_value(busy)}" if busy is not None else ""
        return (f"This run has no GPM counters (SM, tensor-core and DRAM activity) at batch {b}, so NVML busy-time "
                f"is its only GPU signal{reads}.")
    parts = [f"{label} {pct_value(found[c])}{GPM_SUFFIX[c]}" for c, label in GPM_COUNTERS if c in found]
    listed = ", ".join(parts[:-1]) + f" and {parts[-1]}" if len(parts) > 1 else parts[0]
    tensor, dram = found.get("tensor_active_pct"), found.get("dram_bw_util_pct")
    verdict = ""
    if tensor is not None and dram is not None and dram >= 2 * tensor:
        verdict = ": the GPU is mostly moving memory, not doing matrix math"
    elif tensor is not None and dram is not None and tensor >= 2 * dram:
        verdict = ": matrix math now outweighs memory traffic"
    return f"At batch {b}, where throughput is best, the GPM counters say {listed}{verdict}."


def cpu_sentences(run: dict[str, Any], table: pd.DataFrame) -> tuple[str, str]:
    """A run without GPU utilisation: say so, and list the CPU numbers it has instead."""
    device = run.get("gpu_name") or run.get("device") or "not recorded"
    first = (f"This run recorded no GPU utilisation (device: {device}), so there is no GPU busy-time to set "
             f"against throughput.")
    found = []
    cpu = measured(table, "cpu_pct")
    if not cpu.empty:
        a, z = cpu.iloc[0], cpu.iloc[-1]
        found.append(f"process CPU % of {pct_value(a['cpu_pct'])} at batch {int(a['batch_size'])}" if len(cpu) == 1
                     else f"process CPU % going from {pct_value(a['cpu_pct'])} at batch {int(a['batch_size'])} to "
                          f"{pct_value(z['cpu_pct'])} at batch {int(z['batch_size'])}")
    rss = measured(table, "rss_bytes_max")
    if not rss.empty:
        found.append(f"peak resident memory up to {size(rss['rss_bytes_max'].max())}")
    if not found:
        return first, "It recorded no CPU numbers either (process CPU %, peak resident memory), so this step has no data."
    return first, "What it has instead: " + " and ".join(found) + "."