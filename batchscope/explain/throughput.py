"""Explain step 1, throughput against batch size: what the curve does (one word the title and the
sentences both read), where the returns stop, and any dip on the way."""
from __future__ import annotations

import pandas as pd

from batchscope.analysis import Analysis
from batchscope.analysis.marker import pct
from batchscope.analysis.noise import describe_spread, spreads_overlap
from batchscope.explain.words import (PADDING_OF_NOTE, doubling_gain, measured, not_ok_words, oom_past,
                                      padding_words, times, value, with_clause)
from batchscope.units import ms, tok_s

def throughput_shape(table: pd.DataFrame, analysis: Analysis | None) -> str:
    """What the curve does, one word the title and the sentences both read so they never disagree:
    none, one, plateau, first (best at the smallest batch), falls, noisy_fall (the median falls by more
    than a doubling must add, inside the repeats' spread), level (a smaller drop inside the spread), rising."""
    curve = measured(table, "output_tokens_per_s")
    if curve.empty:
        return "none"
    if len(curve) == 1:
        return "one"
    best = curve.loc[curve["output_tokens_per_s"].idxmax()]
    last = curve.iloc[-1]
    plateau = analysis.plateau if analysis is not None else None
    if plateau is not None and (curve["batch_size"] > int(plateau.x)).any():
        return "plateau"
    if int(best["batch_size"]) == int(last["batch_size"]):
        return "rising"
    if int(best["batch_size"]) == int(curve.iloc[0]["batch_size"]):
        return "first"
    if not spreads_overlap(best, last):
        return "falls"
    gain = analysis.plateau_gain if analysis is not None else PADDING_OF_NOTE
    drop = 1 - float(last["output_tokens_per_s"]) / float(best["output_tokens_per_s"])
    return "noisy_fall" if drop >= gain else "level"


def throughput_title(table: pd.DataFrame, analysis: Analysis | None) -> str:
    """The throughput step's title: what this run's curve does, never a claim the curve contradicts."""
    shape = throughput_shape(table, analysis)
    curve = measured(table, "output_tokens_per_s")
    if shape == "none":
        return "Throughput vs batch size: no batch finished yet"
    best = int(curve.loc[curve["output_tokens_per_s"].idxmax(), "batch_size"])
    last, first = int(curve.iloc[-1]["batch_size"]), int(curve.iloc[0]["batch_size"])
    ceiling = oom_past(table, last)
    titles = {
        "one": f"Throughput at batch {first}: one point, no curve yet",
        "plateau": f"Throughput plateaus past batch {int(analysis.plateau.x) if analysis and analysis.plateau else best}",
        "first": f"Throughput is highest at the smallest batch, {first}: larger batches add none",
        "falls": f"Throughput peaks at batch {best}, then falls",
        "noisy_fall": f"Throughput peaks at batch {best}, then falls (within the repeats' noise)",
        "level": f"Throughput levels off past batch {best}",
        "rising": (f"Throughput still rising at batch {last}, the largest that fit in memory" if ceiling is not None
                   else f"Throughput still rising at the largest batch measured, {last}"),
    }
    return titles[shape] + (", after a dip" if dip(curve) is not None else "")


def throughput_sentences(table: pd.DataFrame, analysis: Analysis | None) -> tuple[str, str]:
    """From the first to the best batch (and by how much), then where the returns stop, and any dip on the way."""
    opening, second = throughput_pair(table, analysis)
    found = dip(measured(table, "output_tokens_per_s"))
    return opening, (with_clause(second, dip_words(*found)) if found is not None else second)


def throughput_pair(table: pd.DataFrame, analysis: Analysis | None) -> tuple[str, str]:
    shape = throughput_shape(table, analysis)
    curve = measured(table, "output_tokens_per_s")
    if shape == "none":
        return ("No batch size finished with a throughput measurement, so there is no curve to explain yet.",
                not_ok_words(table))
    first, best, last = curve.iloc[0], curve.loc[curve["output_tokens_per_s"].idxmax()], curve.iloc[-1]
    b0, t0 = int(first["batch_size"]), float(first["output_tokens_per_s"])
    bb, tb = int(best["batch_size"]), float(best["output_tokens_per_s"])
    if shape == "one":
        return (f"Only batch {b0} finished ({tok_s(t0)}), so there is no rise to compare yet.",
                "Measure at least two batch sizes to see how throughput answers a bigger batch.")
    if bb == b0:
        opening = f"Throughput is highest at the smallest batch, {b0} ({tok_s(t0)}): no larger batch added any."
    else:
        opening = (f"Throughput rises from {tok_s(t0)} at batch {b0} to {tok_s(tb)} at batch {bb}: "
                   f"{times(tb / t0)} the throughput for a {bb / b0:g}× larger batch.")
    if shape == "plateau":
        plateau = analysis.plateau
        here = curve[curve["batch_size"] == int(plateau.x)].iloc[0]
        nxt = curve[curve["batch_size"] > int(plateau.x)].iloc[0]
        gain = doubling_gain(here, nxt)
        change = f"adds only {pct(gain, 1)}" if gain >= 0 else f"loses {pct(-gain, 1)}"
        return opening, (f"Past batch {int(plateau.x)} it plateaus: going on to batch {int(nxt['batch_size'])} "
                         f"{change} per doubling ({tok_s(here['output_tokens_per_s'])} → "
                         f"{tok_s(nxt['output_tokens_per_s'])}), under the {pct(analysis.plateau_gain)} a doubling "
                         f"must add to count as still rising.")
    if shape in ("falls", "noisy_fall", "level", "first"):
        drop = 1 - float(last["output_tokens_per_s"]) / tb
        why = padding_words(last) + step_words(best, last)
        if shape == "level" or (shape == "first" and spreads_overlap(best, last)):
            return opening, (f"Past batch {bb} it stays level within the noise: batch {int(last['batch_size'])} "
                             f"gives {tok_s(last['output_tokens_per_s'])}, {pct(drop, 1)} less, but their repeats "
                             f"overlap ({describe_spread(best)} against {describe_spread(last)}).")
        if shape == "noisy_fall":
            return opening, (f"Past its peak at batch {bb} the median falls: batch {int(last['batch_size'])} gives "
                             f"{tok_s(last['output_tokens_per_s'])}, {pct(drop, 1)} less (their repeats overlap, "
                             f"{describe_spread(best)} against {describe_spread(last)}, so how much is noise, but it "
                             f"bought nothing){why}.")
        return opening, (f"Past its peak at batch {bb} it falls: batch {int(last['batch_size'])} gives "
                         f"{tok_s(last['output_tokens_per_s'])}, {pct(drop, 1)} less{why}.")
    first_gain = doubling_gain(curve.iloc[0], curve.iloc[1])
    last_gain = doubling_gain(curve.iloc[-2], curve.iloc[-1])
    last_step = f"{int(curve.iloc[-2]['batch_size'])} → {int(last['batch_size'])}"
    ceiling = oom_past(table, int(last["batch_size"]))
    beyond = (f"; batch {ceiling} ran out of memory, so this is as far as the device goes" if ceiling is not None
              else "")
    if len(curve) == 2:
        more = beyond or "; more batch sizes would show where the returns fall off"
        return opening, f"The one step measured, {last_step}, added {pct(last_gain, 1)} per doubling{more}."
    first_step = f"{b0} → {int(curve.iloc[1]['batch_size'])}"
    if last_gain < first_gain:
        return opening, (f"Each doubling pays less: the first step ({first_step}) added {pct(first_gain, 1)} per "
                         f"doubling, the last ({last_step}) only {pct(last_gain, 1)}{beyond}.")
    where = beyond or ", so the plateau lies beyond the largest batch measured"
    return opening, (f"It has not flattened yet: the last step ({last_step}) still added {pct(last_gain, 1)} per "
                     f"doubling (the first, {first_step}, {pct(first_gain, 1)}){where}.")


def dip(curve: pd.DataFrame) -> tuple[pd.Series, pd.Series, pd.Series] | None:
    """The deepest fall inside the curve that a later batch recovers from: (peak before it, lowest point,
    first point back at or above the peak); None when every fall is final (or there is none)."""
    found, peak, trough = None, None, None
    for _, point in curve.iterrows():
        t = float(point["output_tokens_per_s"])
        if peak is None or t >= float(peak["output_tokens_per_s"]):
            if trough is not None:
                depth = 1 - float(trough["output_tokens_per_s"]) / float(peak["output_tokens_per_s"])
                if found is None or depth > found[0]:
                    found = (depth, peak, trough, point)
            peak, trough = point, None
        elif trough is None or t < float(trough["output_tokens_per_s"]):
            trough = point
    return found[1:] if found is not None else None


def dip_words(peak: pd.Series, trough: pd.Series, back: pd.Series) -> str:
    """The dip in the run's numbers, and whether its repeats resolve it."""
    drop = 1 - float(trough["output_tokens_per_s"]) / float(peak["output_tokens_per_s"])
    noise = ", within the noise: their repeats overlap" if spreads_overlap(peak, trough) else ""
    return (f"on the way it dips from {tok_s(peak['output_tokens_per_s'])} at batch {int(peak['batch_size'])} to "
            f"{tok_s(trough['output_tokens_per_s'])} at batch {int(trough['batch_size'])} ({pct(drop, 1)} less{noise})"
            f" before batch {int(back['batch_size'])} recovers to {tok_s(back['output_tokens_per_s'])}")


def step_words(low: pd.Series, high: pd.Series) -> str:
    """The decode-step floor: when the step grew about as fast as the batch, more rows bought no more tokens/s."""
    a, z = value(low, "decode_step_ms"), value(high, "decode_step_ms")
    grown = float(high["batch_size"]) / float(low["batch_size"])
    if a is None or z is None or grown <= 1 or z / a < 0.75 * grown:
        return ""
    return (f"; a decode step went from {ms(a)} at batch {int(low['batch_size'])} to {ms(z)} at batch "
            f"{int(high['batch_size'])}, {times(z / a)} for {times(grown)} the rows")