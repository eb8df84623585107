"""Length distributions for prompts and outputs, written as short strings (`lognormal:512:0.6`).

Torch-free on purpose: the New sweep page previews the same samples the runner will draw.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path

SYNTAX = "fixed:N, uniform:LO:HI, normal:MEAN:SD, lognormal:MEDIAN:SIGMA or file:PATH"
MAX_LENGTH = 10_000_000  # tokens: past every model's context, and every draw stays a finite number
MAX_SIGMA = 10.0  # already absurd for lengths (one sigma is 22,000× the median), and keeps exp() finite
MAX_FILE_BYTES = 1 << 20  # a length file is read again for every batch the sweep draws


@dataclass(frozen=True)
class Distribution:
    """A named, parameterised length distribution; sampling is seeded and always ≥ 1."""

    kind: str
    params: tuple[float, ...] = ()
    values: tuple[int, ...] = ()  # for kind == "file"
    text: str = ""

    def sample(self, n: int, rng: random.Random) -> list[int]:
        return [self._one(rng) for _ in range(n)]

    def _one(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            return int(self.params[0])
        if self.kind == "uniform":
            return rng.randint(int(self.params[0]), int(self.params[1]))
        if self.kind == "normal":
            return max(1, round(rng.gauss(self.params[0], self.params[1])))
        if self.kind == "lognormal":
            return max(1, round(rng.lognormvariate(math.log(self.params[0]), self.params[1])))
        return rng.choice(self.values)

    def upper_bound(self) -> int | None:
        """The largest length this can draw, when it has one (used to check the context early)."""
        if self.kind == "fixed":
            return int(self.params[0])
        if self.kind == "uniform":
            return int(self.params[1])
        if self.kind == "file":
            return max(self.values)
        return None


def parse(text: str) -> Distribution:
    """Parse `kind:params`; every malformed input gets a message that says the right syntax."""
    raw = (text or "").strip()
    kind, _, rest = raw.partition(":")
    kind = kind.lower()
    if kind == "file":
        return _from_file(rest, raw)
    parts = rest.split(":") if rest else []
    counts = {"fixed": 1, "uniform": 2, "normal": 2, "lognormal": 2}
    if kind not in counts:
        raise ValueError(f"unknown distribution {raw!r}: use {SYNTAX}")
    if len(parts) != counts[kind]:
        raise ValueError(f"{kind} takes {counts[kind]} number(s): {raw!r} (use {SYNTAX})")
    try:
        nums = tuple(float(p) for p in parts)
    except ValueError:
        raise ValueError(f"not a number in {raw!r} (use {SYNTAX})") from None
    if any(math.isnan(x) or math.isinf(x) for x in nums):
        raise ValueError(f"not a finite number in {raw!r}")
    _check(kind, nums, raw)
    return Distribution(kind, nums, text=raw)


def _check(kind: str, nums: tuple[float, ...], raw: str) -> None:
    if kind in ("fixed", "uniform") and any(x != int(x) for x in nums):
        raise ValueError(f"lengths must be whole numbers: {raw!r}")
    if kind == "fixed" and nums[0] < 1:
        raise ValueError(f"length must be ≥ 1: {raw!r}")
    if kind == "uniform" and not 1 <= nums[0] <= nums[1]:
        raise ValueError(f"uniform needs 1 ≤ LO ≤ HI: {raw!r}")
    if kind == "normal" and (nums[0] < 1 or nums[1] < 0):
        raise ValueError(f"normal needs MEAN ≥ 1 and SD ≥ 0: {raw!r}")
    if kind == "lognormal" and (nums[0] < 1 or nums[1] < 0):
        raise ValueError(f"lognormal needs MEDIAN ≥ 1 and SIGMA ≥ 0: {raw!r}")
    if max(nums[:1] if kind == "lognormal" else nums) > MAX_LENGTH:
        raise ValueError(f"lengths are at most {MAX_LENGTH:,} tokens: {raw!r}")
    if kind == "lognormal" and nums[1] > MAX_SIGMA:
        raise ValueError(f"lognormal SIGMA must be at most {MAX_SIGMA:g}: {raw!r}")


def _from_file(path_text: str, raw: str) -> Distribution:
    """A file of lengths: whole numbers separated by commas, spaces or new lines."""
    path = Path(path_text)
    try:
        if not path_text or not path.is_file():
            raise ValueError(f"length file not found: {path_text!r}")
        if path.stat().st_size > MAX_FILE_BYTES:
            raise ValueError(f"length file {path_text!r} is over {MAX_FILE_BYTES >> 20} MiB")
        tokens = path.read_text().replace(",", " ").split()
    except OSError as err:
        raise ValueError(f"length file {path_text!r} cannot be read ({err.strerror or err})") from None
    try:
        values = tuple(int(t) for t in tokens)
    except ValueError:
        raise ValueError(f"length file {path_text!r} holds something that is not a whole number") from None
    if not values:
        raise ValueError(f"length file {path_text!r} is empty")
    if min(values) < 1:
        raise ValueError(f"length file {path_text!r} holds a length < 1")
    if max(values) > MAX_LENGTH:
        raise ValueError(f"length file {path_text!r} holds a length over {MAX_LENGTH:,} tokens")
    return Distribution("file", values=values, text=raw)


def sample_lengths(text: str, n: int, seed: int) -> list[int]:
    """n lengths from a distribution string with a fixed seed (the preview and the runner agree)."""
    return parse(text).sample(n, random.Random(seed))
