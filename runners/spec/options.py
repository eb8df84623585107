"""What every spec option shares: its declaration (label, help, group, modes, choices, bounds) that the
command line, the form and validation read; the error that names its field; and the one check of an
option's value by its declared type and bounds, run before any work that grows with the value (issue 38).

Every message leaves through `cut`: a long value is shown by its first characters and its length, so one
bad value cannot flood a terminal, a log or the form.
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import MISSING, Field, dataclass, field
from typing import Any

MAX_TEXT = 4096  # characters in a text option: a path, a URL or a command line is never longer
MAX_VALUES = 1024  # values in one list option
MAX_BATCH_SIZE = 65_536  # the largest batch, running-batch limit or client count a list option takes
MAX_MESSAGE = 170  # characters in a problem's message: with its field's name, a line under 200
_LONG_NUMBER = re.compile(r"\d{25,}")  # a number a message always shows cut
_LONG_RUN = re.compile(r"\S{61,}")  # a run of characters a message too long shows cut (a path, a name)
_WHOLE = re.compile(r"[+-]?\d+")
_DIGITS = 18  # a whole number written with more digits is past every bound (all under 10¹⁸): never converted


def cut(message: str) -> str:
    """`message` with each long number shown as its first digits and its count, and, when it is still over
    MAX_MESSAGE characters, each long run of characters as its first ones and its length; at most
    MAX_MESSAGE characters in all."""
    text = _LONG_NUMBER.sub(lambda run: f"{run[0][:20]}… ({len(run[0]):,} digits)", message)
    if len(text) > MAX_MESSAGE:
        text = _LONG_RUN.sub(lambda run: f"{run[0][:40]}… ({len(run[0]):,} characters)", text)
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE - 1] + "…"


class SpecError(ValueError):
    """A rejected option: `field` names the option so a form can show the message beside it."""

    def __init__(self, field_name: str, message: str) -> None:
        message = cut(message)
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.message = message


def option(default: Any = MISSING, *, label: str, help: str, group: str = "", factory: Any = MISSING,
           least: float | None = None, most: float | None = None, above: float | None = None,
           longest: int = MAX_TEXT, choices: tuple[str, ...] = (), modes: tuple[str, ...] = (),
           memory: bool = False) -> Any:
    """A SweepSpec field, declared once for the command line, the New sweep form and validation: its form
    `label`, its `help`, the flag group it is listed in (`group`), the modes it applies to (`modes`; none:
    every mode), the values it takes (`choices`) and whether it changes the memory the form predicts
    before a sweep runs (`memory`: the estimate validates only those, so a bad URL never hides it). A
    number is at least `least`, over `above` and at most `most` (a list's values too; the form's widget
    stops there); text is at most `longest` characters."""
    bounds = {key: value for key, value in (("least", least), ("most", most), ("above", above)) if value is not None}
    return field(default=default, default_factory=factory,
                 metadata={"label": label, "help": help, "group": group, "longest": longest, "choices": choices,
                           "modes": modes, "memory": memory, **bounds})


@dataclass(frozen=True)
class FieldInfo:
    """One spec option as its readers see it (the CLI, the form, the estimate, "run this again")."""

    name: str
    kind: str  # "int", "float", "bool", "str" or "list[int]", as the dataclass declares it
    label: str
    help: str
    group: str
    default: Any
    least: float | None
    most: float | None
    above: float | None
    longest: int
    choices: tuple[str, ...]
    modes: tuple[str, ...]
    memory: bool

    @classmethod
    def of(cls, spec_field: Field) -> FieldInfo:
        meta = spec_field.metadata
        factory = spec_field.default_factory
        default = spec_field.default if spec_field.default is not MISSING else None if factory is MISSING else factory()
        return cls(spec_field.name, str(spec_field.type), meta["label"], meta["help"], meta["group"], default,
                   meta.get("least"), meta.get("most"), meta.get("above"), meta["longest"], meta["choices"],
                   meta["modes"], meta["memory"])

    def applies_to(self, mode: str) -> bool:
        """True when a sweep of `mode` reads this option."""
        return not self.modes or mode in self.modes


def shown(value: Any) -> str:
    """A value as a message quotes it (cut shortens it when long)."""
    try:
        return repr(value)
    except ValueError:  # an integer past Python's limit on the digits it converts to text
        return f"a number of about {int(value.bit_length() * math.log10(2)):,} digits"


def _json_type(value: Any) -> str:
    """What a JSON value is, in words."""
    kinds = ((bool, "true/false"), (dict, "an object"), ((list, tuple), "a list"), ((int, float), "a number"),
             (str, "text"))
    return next((word for kind, word in kinds if isinstance(value, kind)), type(value).__name__)


def figure(x: float) -> str:
    """A bound as a message writes it: 65,536, 86,400,000, 0.05."""
    return f"{int(x):,}" if float(x).is_integer() else f"{x:,g}"


def _bounds(number: float, name: str, value: Any, least: float | None, most: float | None,
            above: float | None) -> None:
    """SpecError when `number` is outside the bounds; the message shows the value as written, a number
    from text as from JSON."""
    written = value.strip() if isinstance(value, str) else shown(value)
    if above is not None and not number > above:
        over = "a positive number" if above == 0 else f"over {figure(above)}"
        raise SpecError(name, f"{name} must be {over}, got {written}")
    if least is not None and number < least:
        raise SpecError(name, f"{name} must be ≥ {figure(least)}, got {written}")
    if most is not None and number > most:
        raise SpecError(name, f"{name} must be at most {figure(most)}, got {written}")


def short_text(text: str, name: str, longest: int = MAX_TEXT) -> str:
    """`text` when it is at most `longest` characters, refused by its length before any work that reads it."""
    if len(text) > longest:
        raise SpecError(name, f"{name} is at most {longest:,} characters, got {len(text):,}")
    return text


def whole(value: Any, name: str, least: int, most: int) -> int:
    """A whole number from JSON or text within its bounds; one written with more digits than any bound
    has is refused by its length, never converted."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise SpecError(name, f"not a whole number: {shown(value)}")
    if isinstance(value, str):
        text = value.strip()
        if not _WHOLE.fullmatch(text):
            raise SpecError(name, f"not a whole number: {shown(value)}")
        too_long = len(text.lstrip("+-")) > _DIGITS
        number: float = int(text) if not too_long else -math.inf if text.startswith("-") else math.inf
    elif isinstance(value, float):
        if not value.is_integer():
            raise SpecError(name, f"not a whole number: {shown(value)}")
        number = value
    else:
        number = value
    _bounds(number, name, value, least, most, None)
    return int(number)


def number(value: Any, name: str, least: float | None = None, most: float | None = None,
           above: float | None = None) -> float:
    """A finite real number from JSON or text (true/false are not numbers) within its bounds; text longer than
    any text option is refused by its length, as `0000…` thousands of zeros long would otherwise read as 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise SpecError(name, f"not a number: {shown(value)}")
    if isinstance(value, str):
        short_text(value, name)
    try:
        result = float(value)
    except OverflowError:  # an integer past every float: past every bound too
        result = math.inf if value > 0 else -math.inf
    except ValueError:
        raise SpecError(name, f"not a number: {shown(value)}") from None
    if math.isnan(result):
        raise SpecError(name, f"not a number: {shown(value)}")
    _bounds(result, name, value, least, most, above)
    if math.isinf(result):
        raise SpecError(name, f"{name} must be a finite number, got {shown(value)}")
    return result


def parse_batch_sizes(value: Any, name: str = "batch_sizes", most: int = MAX_BATCH_SIZE) -> list[int]:
    """Accept a list, `1,2,4`, or `pow2:LO:HI` (powers of two from LO to HI inclusive), each value from 1 to
    `most` and at most MAX_VALUES of them."""
    if isinstance(value, str):
        text = short_text(value.strip(), name)
        if text.startswith("pow2:"):
            if ":" not in text[5:]:
                raise SpecError(name, f"pow2 range must be pow2:LO:HI with 1 ≤ LO ≤ HI: {text!r}")
            lo, hi = (whole(x, name, 1, most) for x in text[5:].split(":", 1))
            if hi < lo:
                raise SpecError(name, f"pow2 range must be pow2:LO:HI with 1 ≤ LO ≤ HI: {text!r}")
            sizes = [1 << k for k in range(hi.bit_length()) if lo <= 1 << k <= hi]
            if not sizes:
                raise SpecError(name, f"no power of two lies in {text!r}")
            return sizes
        items = [x for x in text.replace(" ", ",").split(",") if x]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        raise SpecError(name, f"give a list like 1,2,4 or pow2:1:256, not {_json_type(value)}")
    if not items:
        raise SpecError(name, "no batch sizes given")
    if len(items) > MAX_VALUES:
        raise SpecError(name, f"{name} takes at most {MAX_VALUES:,} values, got {len(items):,}")
    return sorted({whole(x, name, 1, most) for x in items})


def check_option(info: FieldInfo, value: Any) -> Any:
    """One option's value checked by its declared type and bounds: the value to use, or SpecError."""
    name, kind = info.name, info.kind
    if kind == "bool":
        if not isinstance(value, bool):
            raise SpecError(name, f"{name} must be true or false, got {shown(value)}")
        return value
    if kind == "int":
        return whole(value, name, info.least, info.most)
    if kind == "float":
        return number(value, name, info.least, info.most, info.above)
    if kind == "list[int]":
        if value in ("", []):  # none given: the mode's check says whether it needs one
            return value
        single = isinstance(value, (int, float)) and not isinstance(value, bool)
        return parse_batch_sizes([value] if single else value, name, info.most)
    if not isinstance(value, str):
        raise SpecError(name, f"{name} is text, not {_json_type(value)}: {shown(value)}")
    return short_text(value, name, info.longest).strip()


def check_options(infos: Iterable[FieldInfo], values: dict[str, Any], found: dict[str, str]) -> None:
    """Check every given option (check_option) in place: a good value is replaced by the one to use, a bad
    one is dropped from `values` with its problem in `found`, so no later check works on it."""
    for info in infos:
        if info.name in values:
            try:
                values[info.name] = check_option(info, values[info.name])
            except SpecError as err:
                found.setdefault(err.field, err.message)
                del values[info.name]


def copy_given(spec: Any, values: dict[str, Any], *names: str) -> None:
    """Set each named option that was given (and passed check_options) on the spec."""
    for name in names:
        if name in values:
            setattr(spec, name, values[name])


def record(found: dict[str, str], name: str, fn: Callable[[], Any]) -> Any:
    """`fn()`, or None with its SpecError (or ValueError, under `name`) recorded in `found`."""
    try:
        return fn()
    except SpecError as err:
        found.setdefault(err.field, err.message)
    except ValueError as err:
        found.setdefault(name, cut(str(err)))
    return None
