"""What every spec option shares: the error that names its field, whole-number parsing, and the field
declaration whose help text the command line shows (runners.cli builds its flags from the spec)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, field, fields
from typing import Any


class SpecError(ValueError):
    """A rejected option: `field` names the option so a form can show the message beside it."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.message = message


def option(default: Any = MISSING, *, help: str, group: str = "", factory: Any = MISSING,
           most: int | None = None) -> Any:
    """A SweepSpec field with its command-line help; `group` names the flag group it is listed in, `most`
    the largest whole number it takes (the form's widget stops there too)."""
    metadata = {"help": help, "group": group, **({"most": most} if most is not None else {})}
    return field(default=default, default_factory=factory, metadata=metadata)


def whole(value: Any, name: str) -> int:
    if isinstance(value, bool):
        raise SpecError(name, f"not a whole number: {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    try:
        return int(str(value).strip())
    except ValueError:
        raise SpecError(name, f"not a whole number: {value!r}") from None


def number(value: Any, name: str) -> float:
    """A real number from JSON or text (true/false are not numbers); SpecError otherwise."""
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        try:
            return float(value)
        except (ValueError, OverflowError):
            pass
    raise SpecError(name, f"not a number: {value!r}")


def parse_batch_sizes(value: Any, name: str = "batch_sizes") -> list[int]:
    """Accept a list, `1,2,4`, or `pow2:LO:HI` (powers of two from LO to HI inclusive)."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("pow2:"):
            lo, hi = (whole(x, name) for x in text[5:].split(":", 1)) if ":" in text[5:] else (None, None)
            if lo is None or lo < 1 or hi < lo:
                raise SpecError(name, f"pow2 range must be pow2:LO:HI with 1 ≤ LO ≤ HI: {text!r}")
            sizes, b = [], 1
            while b <= hi:
                if b >= lo:
                    sizes.append(b)
                b *= 2
            if not sizes:
                raise SpecError(name, f"no power of two lies in {text!r}")
            return sizes
        items = [x for x in text.replace(" ", ",").split(",") if x]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        raise SpecError(name, "give a list like 1,2,4 or pow2:1:256")
    if not items:
        raise SpecError(name, "no batch sizes given")
    sizes = [whole(x, name) for x in items]
    if any(b < 1 for b in sizes):
        raise SpecError(name, f"batch sizes must be ≥ 1: {sizes}")
    return sorted(set(sizes))


def set_whole_numbers(spec: Any, values: dict[str, Any], bounds: tuple[tuple[str, int], ...],
                      found: dict[str, str]) -> None:
    """Copy whole-number options into the spec, each at least its lower bound and at most the `most` its
    declaration gives; problems go to `found`."""
    most = {f.name: f.metadata.get("most") for f in fields(spec)}
    for name, lo in bounds:
        if name not in values:
            continue
        try:
            number = whole(values[name], name)
        except SpecError as err:
            found.setdefault(err.field, err.message)
            continue
        if number < lo:
            found.setdefault(name, f"{name} must be ≥ {lo}, got {number}")
        elif most[name] is not None and number > most[name]:
            found.setdefault(name, f"{name} must be at most {most[name]:,}")
        else:
            setattr(spec, name, number)


def record(found: dict[str, str], name: str, fn: Callable[[], Any]) -> Any:
    """`fn()`, or None with its SpecError (or ValueError, under `name`) recorded in `found`."""
    try:
        return fn()
    except SpecError as err:
        found.setdefault(err.field, err.message)
    except ValueError as err:
        found.setdefault(name, str(err))
    return None
