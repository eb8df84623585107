"""Analysed runs kept between redraws: a live run is re-analysed when the store has changed, no sooner.

The Run page redraws a live run every 2 s, and Streamlit reruns a page on every widget change; reading
all points and analysing them each time is the slowest part of a page. An analysis depends only on the
run's stored points, its model facts and calibration, and the SLO, so it is cached under a key made of
what changes when those do: the number of stored points, the run's state, when it was imported, and
its model and calibration. A finished run is therefore analysed once per SLO; a run that gains a point
is analysed again at the next redraw.
"""
from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from batchscope.analysis import SLO
from batchscope.store import Store
from batchscope.ui.run_view import RunData, load_run

T = TypeVar("T")
CACHED_RUNS = 64  # least recently used beyond this are dropped (a History overlay holds up to ten)
GATES = 16  # analyses of the same run and SLO wait for each other; of different ones, mostly not
MADE_PER_RUN = 32  # things made from one analysis (made) beyond this are all dropped: a window or price per key


def version(store: Store, run: dict[str, Any]) -> Hashable:
    """What must change for a stored run's analysis to change (see the module docstring)."""
    facts = json.dumps([run.get("model"), run.get("calibration")], sort_keys=True, default=str)
    return (len(store.point_indices(run["run_id"])), run.get("state"), str(run.get("imported_at")), facts)


class RunCache:
    """A thread-safe LRU of analysed runs, shared by every session of the server process."""

    def __init__(self, size: int = CACHED_RUNS) -> None:
        self._size = size
        self._entries: OrderedDict[Hashable, RunData] = OrderedDict()
        self._lock = threading.Lock()
        self._gates = [threading.Lock() for _ in range(GATES)]

    def load(self, store: Store, run_id: str, slo: SLO | None) -> RunData | None:
        """The run analysed under `slo` (None for an unknown id), from the cache while it is current.

        The run's record (name, status, fingerprint) is always read fresh; only the analysis is kept.
        """
        run = store.run(run_id)
        if run is None:
            return None
        key = (str(store.path), run_id, slo, version(store, run))
        found = self._get(key)
        if found is None:
            # one analysis per run and SLO at a time (Home analyses ahead while a page may ask for the same
            # run); other sessions keep drawing from the cache meanwhile
            with self._gates[hash(key[:3]) % GATES]:
                found = self._get(key)
                if found is None:
                    found = load_run(store, run_id, slo)
                    if found is None:
                        return None
                    self._put(key, found)
        return RunData(run, found.analysis, found.split, found.per_gpu, found.made)

    def _get(self, key: Hashable) -> RunData | None:
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
            return found

    def _put(self, key: tuple, found: RunData) -> None:
        with self._lock:
            for stale in [k for k in self._entries if k[:3] == key[:3]]:  # older versions of this run
                del self._entries[stale]
            self._entries[key] = found
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)


def made(data: RunData, key: Hashable, make: Callable[[], T]) -> T:
    """`make()`, once per analysis of the run: what a page builds from it (the Run page's spec, tables and
    sentences, 0.3 s of CPU a warm page, more under load) is kept with the cached analysis and goes when the
    stored run changes. `key` names what it is and everything else it depends on (SLO, width, price, name)."""
    found = data.made.get(key, _MISSING)  # one lookup: another session may clear it meanwhile
    if found is _MISSING:
        found = make()
        if len(data.made) >= MADE_PER_RUN:
            data.made.clear()
        data.made[key] = found
    return found


_MISSING = object()
