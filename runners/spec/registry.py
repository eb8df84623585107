"""The modes and engines a sweep can name, each with what it can do, declared once.

Callers ask a question (`is_load_driven(mode)`, `measures_a_server(mode)`) instead of comparing a name
with a string, so adding a mode or an engine means declaring it here and nowhere else. Torch-free and
import-free on purpose: the spec, the runner and the app all read it.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class ModeKind:
    """A sweep mode and the capabilities its call sites ask about."""

    name: str
    user_batch_sizes: bool  # the user lists the batch sizes; each point is one batch of that size
    load_driven: bool  # requests arrive over time (a rate or clients), num_requests per repeat
    in_process: bool  # BatchScope runs the model itself; False: it measures a running server
    slot_cache: bool  # BatchScope's own scheduler admits requests into max_num_seqs slots allocated up front


@dataclass(frozen=True)
class EngineKind:
    """An engine and the capabilities its call sites ask about."""

    name: str
    remote: bool  # it sends requests to a running server instead of loading a model
    shows_gpu_knee: bool  # its per-step host overhead is small enough that the GPU's own throughput knee shows
    static_rows_padded: bool  # a static batch's decode row attends over the batch's longest prompt (hf-generate pads
    # on the left) rather than its own (the fast engine's rows continue from their own length): what a step reads
    whole_cache_until: int  # the engine's last version whose static decode step attended over the whole KV cache
    # set up for the point (its draws' longest prompt plus longest output), masked, not the part filled so far; 0: none


MODE_KINDS: dict[str, ModeKind] = {kind.name: kind for kind in (
    ModeKind("static", user_batch_sizes=True, load_driven=False, in_process=True, slot_cache=False),
    ModeKind("continuous", user_batch_sizes=False, load_driven=True, in_process=True, slot_cache=True),
    ModeKind("endpoint", user_batch_sizes=False, load_driven=True, in_process=False, slot_cache=False),
)}
ENGINE_KINDS: dict[str, EngineKind] = {kind.name: kind for kind in (
    EngineKind("hf-generate", remote=False, shows_gpu_knee=False, static_rows_padded=True, whole_cache_until=0),
    EngineKind("fast", remote=False, shows_gpu_knee=True, static_rows_padded=False, whole_cache_until=2),
    EngineKind("endpoint", remote=True, shows_gpu_knee=False, static_rows_padded=False, whole_cache_until=0),
)}
MODES = tuple(MODE_KINDS)
ENGINES = tuple(ENGINE_KINDS)
DEFAULT_MODE = MODES[0]  # what a spec written before modes existed ran


def _mode(mode: str | None) -> ModeKind | None:
    """A stored spec may lack its mode (it then ran the default) or name one this version does not know."""
    return MODE_KINDS.get(mode or DEFAULT_MODE)


def sweeps_batch_size(mode: str | None) -> bool:
    """Whether the user chooses the batch sizes and each point is one batch (the static mode)."""
    kind = _mode(mode)
    return kind is not None and kind.user_batch_sizes


def is_load_driven(mode: str | None) -> bool:
    """Whether requests arrive over time under a rate or clients, num_requests per repeat."""
    kind = _mode(mode)
    return kind is not None and kind.load_driven


def measures_a_server(mode: str | None) -> bool:
    """Whether the sweep measures a running server rather than a model BatchScope loads itself."""
    kind = _mode(mode)
    return kind is not None and not kind.in_process


def schedules_slots(mode: str | None) -> bool:
    """Whether BatchScope's own scheduler admits requests into max_num_seqs slots it allocates up front."""
    kind = _mode(mode)
    return kind is not None and kind.slot_cache


def modes_that(predicate: Callable[[str], bool]) -> tuple[str, ...]:
    """The modes for which `predicate` holds, in declaration order (e.g. the modes an option applies to)."""
    return tuple(name for name in MODES if predicate(name))


def engine_is_remote(engine: str | None) -> bool:
    """Whether the engine measures a running server (and so fixes the mode to one that measures a server)."""
    kind = ENGINE_KINDS.get(engine or "")
    return kind is not None and kind.remote


def engine_shows_gpu_knee(engine: str | None) -> bool:
    """Whether the engine's per-step host overhead is small enough that the GPU's own knee shows."""
    kind = ENGINE_KINDS.get(engine or "")
    return kind is not None and kind.shows_gpu_knee


def static_rows_padded(engine: str | None) -> bool:
    """Whether each row of the engine's static batch attends over the batch's longest prompt rather than its own
    (an engine this version does not know: padded, as `model.generate()` does)."""
    kind = ENGINE_KINDS.get(engine or "")
    return kind is None or kind.static_rows_padded


def engine_release(engine: str | None, engine_version: str | None) -> int | None:
    """The engine's version number in a run's recorded engine version ("fast 2 (packed prefill, …)" → 2); None where
    it names none."""
    number = re.match(rf"{re.escape(engine)} (\d+)\b", engine_version or "") if engine else None
    return int(number.group(1)) if number else None


def decode_reads_whole_cache(engine: str | None, mode: str | None, engine_version: str | None) -> bool:
    """Whether each decode step read the whole KV cache the point set up rather than what was filled: the fast
    engine's static batches up to its version 2 (`engine_version` is the run's recorded one; its continuous
    batches always read each row's own blocks). False where the version is not recorded."""
    kind = ENGINE_KINDS.get(engine or "")
    if kind is None or not kind.whole_cache_until or not sweeps_batch_size(mode):
        return False
    release = engine_release(engine, engine_version)
    return release is not None and release <= kind.whole_cache_until


def server_mode() -> str:
    """The mode a remote engine runs: the one mode that measures a server."""
    (mode,) = modes_that(measures_a_server)
    return mode
