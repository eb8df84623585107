"""How a sweep ended, judged from its points: a sweep in which no point measured anything failed, and
says for what cause, so a server that was never there is not reported `done` (issue 38).

Torch-free and pure, so the rule is tested on its own; `runners.sweep` applies it to every point it ran.
"""
from __future__ import annotations

import re
from collections.abc import Sequence

_NUMBER = re.compile(r"\d+(\.\d+)?")


def cause(error: str | None) -> str:
    """An error with its numbers blanked: points fail for the same cause when only their counts, sizes or
    ports differ ("all 4 requests failed" and "all 8 requests failed")."""
    return _NUMBER.sub("#", error or "")


def ending(outcomes: Sequence[tuple[str, str | None]]) -> tuple[str, str | None]:
    """The final state and its error line from each point's (status, error), in the order they ran:
    ("done", None) when every point is ok or none ran; ("done", "K of N points failed ...") when some are
    ok; ("failed", "no point succeeded; ...") when none is, naming the first failed point's error and how
    many points failed for its cause. The error comes last, so a terminal's last line ends with it."""
    failed = [error or status for status, error in outcomes if status != "ok"]
    if not failed:
        return "done", None
    first, total = failed[0], len(outcomes)
    sharing = sum(cause(error) == cause(first) for error in failed)
    if len(failed) < total:
        alike = "" if len(failed) == 1 else f" ({sharing} with the first one's error)"
        return "done", f"{len(failed)} of {total} points failed{alike}: {first}"
    alike = "the only point failed" if total == 1 else f"{sharing} of {total} failed with the first point's error"
    return "failed", f"no point succeeded; {alike}: {first}"
