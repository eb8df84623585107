"""Where the Explain page stands (run, step, present mode) and how large present mode draws a step.

The place lives in the URL (`/explain?run=RUN&step=3&present=1`, steps counted from 1 as a room does)
so that a reload, or a link sent before a talk, opens the same step; a bad part of a link is said and
replaced, never an error. Present mode must fit one screen without scrolling, so the chart's size is
worked out from the browser's viewport (a default projector size until the browser has reported it).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass

import altair as alt

from batchscope.explain.charts import resize

PARAMS = ("run", "step", "present")
DEFAULT_VIEWPORT = (1440, 900)  # a common laptop/projector size; the browser reports its own when it differs
# the window sizes present mode draws as it does at DEFAULT_VIEWPORT (present_keys' `quiet`): that one only
DRAWN_AS_DEFAULT = (DEFAULT_VIEWPORT[0], DEFAULT_VIEWPORT[0], DEFAULT_VIEWPORT[1], DEFAULT_VIEWPORT[1])
CHART_SHARE = 0.62  # of the page width: the chart's column; the sentences take the rest, beside it
# Room a chart leaves (measured in Chromium at 1440x900 and 1920x1080): across, the page padding, the
# columns' gap and some air; down, the controls row and a step title of up to two lines above it.
SIDE_ROOM, TOP_ROOM = 140, 215
# Side-by-side panels are sized by their plots, with their titles, axes and shared legend on top.
CONCAT_ROOM = (90, 190)
MIN_CHART = (360, 240)
FONT_PER_HEIGHT = 60  # axis font px per px of window height: 15 at 900, 18 at 1080

# Hide Streamlit's header and most of the page's padding while presenting: every pixel goes to the step.
# The max-height and max-width are guards: a chart taller than the room left, or wider than its column (side-by-side
# panels whose axis titles reach past them), is drawn smaller, never cut, scrolled or under the sentences.
PRESENT_CSS = f"""<style>
header[data-testid="stHeader"] {{display: none;}}
.block-container, [data-testid="stMainBlockContainer"] {{padding-top: 0.75rem; padding-bottom: 0.5rem;}}
.st-key-explain_chart svg {{max-height: calc(100vh - {TOP_ROOM - 40}px); max-width: 100%; width: auto; height: auto;}}
</style>"""


FULL_SIZE_TEXT = 520  # characters the two sentences may have at full size beside the chart
SMALLEST_TEXT = 0.7  # of full size: what a long pair is shrunk to at most, still readable across a room


def sentence_css(sentences: Sequence[str]) -> str:
    """Type size for one step's sentences: full size up to FULL_SIZE_TEXT characters, then smaller with the
    square root of the length (the area text takes), so a long pair still fits beside the chart."""
    scale = min(1.0, max(SMALLEST_TEXT, math.sqrt(FULL_SIZE_TEXT / max(1, sum(map(len, sentences))))))
    return (f"<style>.st-key-explain_sentences p {{font-size: max({1.55 * scale:.2f}rem, {1.45 * scale:.2f}vw); "
            f"line-height: 1.35;}}</style>")


@dataclass(frozen=True)
class Place:
    """One place on the page: a run id, a step index (from 0) and whether present mode is on."""

    run: str | None
    step: int = 0
    present: bool = False

    def params(self) -> dict[str, str]:
        """The URL's part of the page: the run always, the step (from 1) only while presenting, where it
        is what the room sees."""
        found = {"run": self.run} if self.run else {}
        return found | ({"step": str(self.step + 1), "present": "1"} if self.present else {})


def from_url(params: Mapping[str, str], now: Place, run_ids: Sequence[str],
             default_run: Callable[[], str | None]) -> tuple[Place, list[str]]:
    """The place a link asks for, from the current one: each part the link has replaces it (a page
    opened from the menu, without a query, keeps where it was). A run id that is not stored falls back
    to `default_run()`, a step that is not a number from 1 to step 1; each fallback is explained. The
    default is asked for only then: choosing it analyses every demo run, most of a linked page's time."""
    notes: list[str] = []
    run, step, present = now.run, now.step, now.present
    if "run" in params and params["run"] != now.run:
        run, step = params["run"], 0
        if run not in run_ids:
            notes.append(f"No run `{run}` is stored here, so the default run opens instead.")
    if run not in run_ids:  # also a first visit, with no run chosen yet
        run = default_run()
    if "step" in params:
        text = params["step"]
        valid = text.isdigit() and int(text) >= 1
        step = int(text) - 1 if valid else 0
        if not valid:
            notes.append(f"`step={text}` is not a step number (they start at 1), so step 1 opens.")
    if "present" in params:
        present = params["present"] in ("1", "true", "yes")
    return Place(run, step, present), notes


def write_url(params: MutableMapping[str, str], place: Place) -> dict[str, str]:
    """Put the place in the URL, touching only what changed (each write is a browser history entry),
    and return what the URL now says, so the page can tell its own URL from a link opened later."""
    wanted = place.params()
    for name in PARAMS:
        if name not in wanted and name in params:
            del params[name]
        elif name in wanted and params.get(name) != wanted[name]:
            params[name] = wanted[name]
    return wanted


def clamp_step(step: int, count: int) -> tuple[int, str | None]:
    """The step index inside the story (0 .. count-1), and a note when a link asked for one past its end."""
    if step < count:
        return max(step, 0), None
    return max(count - 1, 0), f"This story has {count} steps, so step {count} opens instead of step {step + 1}."


def chart_size(viewport: tuple[int, int] | None) -> tuple[int, int]:
    """(width, height) of a step's chart in present mode (Streamlit fits axes and legend inside it): the
    chart's column of the page, and the height below the controls and title, so nothing scrolls."""
    width, height = viewport or DEFAULT_VIEWPORT
    return max(int(width * CHART_SHARE) - SIDE_ROOM, MIN_CHART[0]), max(height - TOP_ROOM, MIN_CHART[1])


def present_chart(chart: alt.TopLevelMixin, viewport: tuple[int, int] | None) -> alt.TopLevelMixin:
    """The step's chart drawn at present mode's size for this window, its axis text grown with the screen."""
    width, height = chart_size(viewport)
    font = max(15, (viewport or DEFAULT_VIEWPORT)[1] // FONT_PER_HEIGHT)
    if isinstance(chart, alt.HConcatChart):
        width, height = max(width - CONCAT_ROOM[0], MIN_CHART[0]), max(height - CONCAT_ROOM[1], MIN_CHART[1] // 2)
    return resize(chart, width, height, font)
