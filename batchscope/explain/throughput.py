"""Explain step 1, throughput against batch size: what the curve does (one word the title and the
sentences both read), where the returns stop, and any dip on the way.

The shape comes from the analysis' own plateau rule and noise rule (`analysis.knee.plateau`,
`analysis.noise`), so the headline never says what the Run page's markers deny: a change whose repeats
overlap is within the noise, and is then never called a rise or a fall."""
from __future__ import annotations

import numpy as np
import pandas as pd

from runners.spec.refine import PLATEAU_GAIN

from batchscope.analysis import Analysis
from batchscope.analysis.axis import BATCH
from batchscope.analysis.knee import PlateauCall, plateau
from batchscope.analysis.marker import pct
from batchscope.analysis.noise import describe_spread, spreads_overlap, unresolved_from
from batchscope.explain.words import (doubling_gain, measured, not_ok_words, oom_past, padding_words, times, value,
                                      with_clause)
from batchscope.units import ms, tok_s

# What the curve does: none, one, rising (no plateau), first (best at the smallest batch), peak (best at
# the plateau, then a fall beyond the noise), plateau (called), levels (the noise leaves open where, from
# `first` to `limit`, the plateau starts).
STOPS = ("peak", "plateau", "levels")


def plateau_call(curve: pd.DataFrame, analysis: Analysis | None) -> PlateauCall | None:
    """The analysis' plateau rule on the measured curve by batch size; None when there is no curve along
    batch size (fewer than two points, or a continuous sweep whose points share one)."""
    if len(curve) < 2 or curve["batch_size"].duplicated().any():
        return None
    x = curve["batch_size"].astype(float)
    gain = analysis.plateau_gain if analysis is not None else PLATEAU_GAIN
    return plateau(curve.assign(x=x, log2_x=np.log2(x)), gain, BATCH)


def throughput_shape(table: pd.DataFrame, analysis: Analysis | None) -> str:
    """What the curve does, one word the title and the sentences both read so they never disagree."""
    curve = measured(table, "output_tokens_per_s")
    if curve.empty:
        return "none"
    if len(curve) == 1:
        return "one"
    call = plateau_call(curve, analysis)
    best = curve.loc[curve["output_tokens_per_s"].idxmax()]
    if call is None or call.limit is None:
        return "first" if int(best["batch_size"]) == int(curve.iloc[0]["batch_size"]) else "rising"
    start = stop_point(curve, call.limit)
    if int(start["batch_size"]) == int(curve.iloc[0]["batch_size"]) and best.name == 0:
        return "first"
    if call.marker is None:
        return "levels"
    gain = analysis.plateau_gain if analysis is not None else PLATEAU_GAIN
    return "peak" if best.name == start.name and falls_after(curve, gain) else "plateau"


def stops_at(table: pd.DataFrame, analysis: Analysis | None) -> int | None:
    """The batch where throughput stops paying by the plateau rule (called, or the latest it can start
    when the noise leaves it open); None while it is still rising."""
    call = plateau_call(measured(table, "output_tokens_per_s"), analysis)
    return int(call.limit) if call is not None and call.limit is not None else None


def stop_point(curve: pd.DataFrame, x: float) -> pd.Series:
    """The point at batch `x` (the plateau, or the latest it can start)."""
    return curve[curve["batch_size"] == int(x)].iloc[0]


def falls_after(curve: pd.DataFrame, by: float = 0.0) -> bool:
    """Whether the largest batch gives less than the best beyond the noise (their repeats apart), and by at
    least `by` (a share of the best: a headline names only a fall as large as a doubling must add)."""
    best, last = curve.loc[curve["output_tokens_per_s"].idxmax()], curve.iloc[-1]
    drop = 1 - float(last["output_tokens_per_s"]) / float(best["output_tokens_per_s"])
    return best.name != last.name and not spreads_overlap(best, last) and drop >= by


def throughput_title(table: pd.DataFrame, analysis: Analysis | None) -> str:
    """The throughput step's title: what this run's curve does, never a claim the curve contradicts."""
    shape = throughput_shape(table, analysis)
    curve = measured(table, "output_tokens_per_s")
    if shape == "none":
        return "Throughput vs batch size: no batch finished yet"
    best = int(curve.loc[curve["output_tokens_per_s"].idxmax(), "batch_size"])
    last, first = int(curve.iloc[-1]["batch_size"]), int(curve.iloc[0]["batch_size"])
    ceiling = oom_past(table, last)
    limit = plateau_call(curve, analysis).limit if shape in STOPS else None
    titles = {
        "one": f"Throughput at batch {first}: one point, no curve yet",
        "first": f"Throughput is highest at the smallest batch, {first}: larger batches add none",
        "peak": f"Throughput peaks at batch {best}, then falls",
        "plateau": f"Throughput plateaus past batch {int(limit or 0)}",
        "levels": f"Throughput levels off by batch {int(limit or 0)}",
        "rising": (f"Throughput still rising at batch {last}, the largest that fit in memory" if ceiling is not None
                   else f"Throughput still rising at the largest batch measured, {last}"),
    }
    gain = analysis.plateau_gain if analysis is not None else PLATEAU_GAIN
    then = ", then falls" if shape in ("plateau", "levels") and falls_after(curve, gain) else ""
    return titles[shape] + then + (", after a dip" if dip(curve) is not None else "")


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
    if shape == "one":
        return (f"Only batch {b0} finished ({tok_s(t0)}), so there is no rise to compare yet.",
                "Measure at least two batch sizes to see how throughput answers a bigger batch.")
    top = best
    if shape in STOPS:  # the rise is told up to where it stops, unless the best lies beyond that, apart from it
        stop = stop_point(curve, plateau_call(curve, analysis).limit)
        top = stop if spreads_overlap(stop, best) else best
    bt, tt = int(top["batch_size"]), float(top["output_tokens_per_s"])
    if bt == b0:
        opening = f"Throughput is highest at the smallest batch, {b0} ({tok_s(t0)}): no larger batch added any."
    else:
        opening = (f"Throughput rises from {tok_s(t0)} at batch {b0} to {tok_s(tt)} at batch {bt}: "
                   f"{times(tt / t0)} the throughput for {article(bt / b0)} {bt / b0:g}× larger batch.")
    if shape in ("plateau", "levels"):
        return opening, stop_sentence(curve, plateau_call(curve, analysis), analysis)
    if shape in ("peak", "first"):
        drop = 1 - float(last["output_tokens_per_s"]) / float(best["output_tokens_per_s"])
        if spreads_overlap(best, last):
            return opening, (f"Past batch {int(best['batch_size'])} it stays level within the noise: batch "
                             f"{int(last['batch_size'])} gives {tok_s(last['output_tokens_per_s'])}, "
                             f"{pct(drop, 1)} less, but their repeats overlap ({describe_spread(best)} against "
                             f"{describe_spread(last)}).")
        return opening, (f"Past its peak at batch {int(best['batch_size'])} it falls: batch {int(last['batch_size'])} "
                         f"gives {tok_s(last['output_tokens_per_s'])}, {pct(drop, 1)} less"
                         f"{padding_words(last)}{step_words(best, last)}.")
    return opening, rising_sentence(table, curve)


def article(number: float) -> str:
    """`a` or `an` before a number read aloud (an 8×, an 11×, an 18×)."""
    return "an" if f"{number:g}".startswith(("8", "11", "18")) else "a"


def stop_sentence(curve: pd.DataFrame, call: PlateauCall, analysis: Analysis | None) -> str:
    """Where the plateau rule stops the curve, what the larger batches give (a rise or fall only where
    their repeats are apart), and, when the noise leaves it open, from which batch it may start."""
    here = stop_point(curve, call.limit)
    gain = analysis.plateau_gain if analysis is not None else PLATEAU_GAIN
    later = curve[curve["batch_size"] > int(here["batch_size"])]
    b = int(here["batch_size"])
    head = f"Past batch {b} it plateaus" if call.marker is not None else f"By batch {b} it levels off"
    apart = [point for _, point in later.iterrows() if not spreads_overlap(here, point)]
    start = unresolved_from(curve, int(here.name))
    hides = (f", which also hides where from batch {int(curve.iloc[start]['batch_size'])} to {b} the plateau "
             f"starts" if call.marker is None else "")
    if not apart:  # every larger batch is within batch b's noise
        gives = " and ".join(f"batch {int(p['batch_size'])} gives {tok_s(p['output_tokens_per_s'])}"
                             for _, p in later.iterrows())
        return (f"{head}: {gives}, against {tok_s(here['output_tokens_per_s'])} at batch {b}: no change beyond the "
                f"repeats' noise{hides} ({spreads(curve.iloc[min(start, int(here.name)):])})"
                f"{why_words(here, later.iloc[-1])}.")
    nxt = later.iloc[0]
    step = doubling_gain(here, nxt)
    change = (f"adds only {pct(step, 1)}" if step >= 0 else f"loses {pct(-step, 1)}")
    said = (f"{head}: going on to batch {int(nxt['batch_size'])} {change} per doubling "
            f"({tok_s(here['output_tokens_per_s'])} → {tok_s(nxt['output_tokens_per_s'])}), under the "
            f"{pct(gain)} a doubling must add to count as still rising")
    if falls_after(curve) and curve.iloc[-1].name != nxt.name:
        best, last = curve.loc[curve["output_tokens_per_s"].idxmax()], curve.iloc[-1]
        drop = 1 - float(last["output_tokens_per_s"]) / float(best["output_tokens_per_s"])
        said += (f"; by batch {int(last['batch_size'])} it falls to {tok_s(last['output_tokens_per_s'])}, "
                 f"{pct(drop, 1)} under the best{padding_words(last)}{step_words(best, last)}")
    if call.marker is None:
        said += (f"; the repeats' noise hides where from batch {int(curve.iloc[start]['batch_size'])} to {b} it "
                 f"starts ({spreads(curve.iloc[start:int(here.name) + 1])})")
    return said + "."


def why_words(low: pd.Series, high: pd.Series) -> str:
    """Why the larger batch bought nothing, in its own numbers: padding, and a decode step grown with the rows."""
    padding = padding_words(high).replace("; there", f"; at batch {int(high['batch_size'])},", 1)
    return padding + step_words(low, high)


def spreads(points: pd.DataFrame) -> str:
    """`batch 4: 445–585 tok/s; batch 8: 481–917 tok/s`: each point's repeat spread."""
    return "; ".join(f"batch {int(p['batch_size'])}: {describe_spread(p)}" for _, p in points.iterrows())


def rising_sentence(table: pd.DataFrame, curve: pd.DataFrame) -> str:
    """How much the first and the last step added per doubling, when no plateau is called."""
    b0, last = int(curve.iloc[0]["batch_size"]), curve.iloc[-1]
    first_gain = doubling_gain(curve.iloc[0], curve.iloc[1])
    last_gain = doubling_gain(curve.iloc[-2], curve.iloc[-1])
    last_step = f"{int(curve.iloc[-2]['batch_size'])} → {int(last['batch_size'])}"
    ceiling = oom_past(table, int(last["batch_size"]))
    beyond = (f"; batch {ceiling} ran out of memory, so this is as far as the device goes" if ceiling is not None
              else "")
    if len(curve) == 2:
        more = beyond or "; more batch sizes would show where the returns fall off"
        return f"The one step measured, {last_step}, added {pct(last_gain, 1)} per doubling{more}."
    first_step = f"{b0} → {int(curve.iloc[1]['batch_size'])}"
    if last_gain < first_gain:
        return (f"Each doubling pays less: the first step ({first_step}) added {pct(first_gain, 1)} per "
                f"doubling, the last ({last_step}) only {pct(last_gain, 1)}{beyond}.")
    where = beyond or ", so the plateau lies beyond the largest batch measured"
    return (f"It has not flattened yet: the last step ({last_step}) still added {pct(last_gain, 1)} per "
            f"doubling (the first, {first_step}, {pct(first_gain, 1)}){where}.")


def dip(curve: pd.DataFrame) -> tuple[pd.Series, pd.Series, pd.Series] | None:
    """The deepest fall inside the curve that a later batch recovers from, beyond the noise (the repeats of
    the peak and the trough apart): (peak before it, lowest point, first point back at or above the peak);
    None when every fall is final, within the noise, or there is none."""
    found, peak, trough = None, None, None
    for _, point in curve.iterrows():
        t = float(point["output_tokens_per_s"])
        if peak is None or t >= float(peak["output_tokens_per_s"]):
            if trough is not None and not spreads_overlap(peak, trough):
                depth = 1 - float(trough["output_tokens_per_s"]) / float(peak["output_tokens_per_s"])
                if found is None or depth > found[0]:
                    found = (depth, peak, trough, point)
            peak, trough = point, None
        elif trough is None or t < float(trough["output_tokens_per_s"]):
            trough = point
    return found[1:] if found is not None else None


def dip_words(peak: pd.Series, trough: pd.Series, back: pd.Series) -> str:
    """The dip in the run's numbers (only a dip beyond the noise is one)."""
    drop = 1 - float(trough["output_tokens_per_s"]) / float(peak["output_tokens_per_s"])
    return (f"on the way it dips from {tok_s(peak['output_tokens_per_s'])} at batch {int(peak['batch_size'])} to "
            f"{tok_s(trough['output_tokens_per_s'])} at batch {int(trough['batch_size'])} ({pct(drop, 1)} less)"
            f" before batch {int(back['batch_size'])} recovers to {tok_s(back['output_tokens_per_s'])}")


def step_words(low: pd.Series, high: pd.Series) -> str:
    """The decode-step floor: when the step grew about as fast as the batch, more rows bought no more tokens/s."""
    a, z = value(low, "decode_step_ms"), value(high, "decode_step_ms")
    grown = float(high["batch_size"]) / float(low["batch_size"])
    if a is None or z is None or grown <= 1 or z / a < 0.75 * grown:
        return ""
    return (f"; a decode step went from {ms(a)} at batch {int(low['batch_size'])} to {ms(z)} at batch "
            f"{int(high['batch_size'])}, {times(z / a)} for {times(grown)} the rows")