"""Background sampler: GPU (NVML, and GPM on Hopper+) or process CPU/RSS, at ≥ 20 Hz.

Samples carry the host clock and the sweep's current stage; the sweep tags each one with its repeat
and phase afterwards from the device timeline, because a CUDA-graph decode loop runs ahead of the
host and a host-side "phase" flag would be wrong by the whole loop.
"""
from __future__ import annotations

import math
import os
import threading
import time
from typing import Any

import torch

try:
    import pynvml
except ImportError:  # a CPU laptop without nvidia-ml-py still samples the process
    pynvml = None

GPM_METRICS = {
    "sm_util_pct": "NVML_GPM_METRIC_SM_UTIL",
    "sm_occupancy_pct": "NVML_GPM_METRIC_SM_OCCUPANCY",
    "tensor_active_pct": "NVML_GPM_METRIC_ANY_TENSOR_UTIL",
    "dram_bw_util_pct": "NVML_GPM_METRIC_DRAM_BW_UTIL",
}
SAMPLE_COLUMNS = ("gpu_util_pct", "mem_ctrl_util_pct", "mem_used_bytes", "power_w", "sm_clock_mhz",
                  *GPM_METRICS, "cpu_pct", "rss_bytes", "clock_reasons", "gpu_processes")
# NVML's clocks event (throttle) reason bits, fixed by its ABI; names as the summary's clock_reasons lists them
CLOCK_REASONS = {0x1: "gpu_idle", 0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
                 0x10: "sync_boost", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake",
                 0x100: "display_clocks"}


def clock_reason_names(bits: int) -> list[str]:
    """The reasons set in an NVML clocks event mask, lowest bit first (unknown bits as hex)."""
    names = [name for bit, name in CLOCK_REASONS.items() if bits & bit]
    rest = bits & ~sum(CLOCK_REASONS)
    return names + ([hex(rest)] if rest else [])


def nvml_handle(device: torch.device) -> Any | None:
    """The NVML handle of a CUDA device (matched by UUID, so CUDA_VISIBLE_DEVICES is respected)."""
    if pynvml is None or device.type != "cuda":
        return None
    try:
        pynvml.nvmlInit()
        uuid = str(torch.cuda.get_device_properties(device).uuid)
        for candidate in (uuid, f"GPU-{uuid}"):
            try:
                return pynvml.nvmlDeviceGetHandleByUUID(candidate)
            except pynvml.NVMLError:
                continue
        return pynvml.nvmlDeviceGetHandleByIndex(device.index or 0)
    except Exception:
        return None


def rss_bytes() -> int:
    """This process's resident memory now, from /proc (no torch, no psutil)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class _ProcessProbe:
    """Process CPU % (all threads, so > 100 on several cores) and RSS from /proc."""

    def __init__(self) -> None:
        self._ticks = os.sysconf("SC_CLK_TCK")
        self._last = (time.perf_counter(), self._cpu_seconds())

    def _cpu_seconds(self) -> float:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / self._ticks

    def read(self) -> dict[str, float]:
        now, cpu = time.perf_counter(), self._cpu_seconds()
        wall = now - self._last[0]
        pct = 100.0 * (cpu - self._last[1]) / wall if wall > 0 else 0.0
        self._last = (now, cpu)
        return {"cpu_pct": pct, "rss_bytes": rss_bytes()}


class _GpuProbe:
    """NVML counters every tick; GPM metrics between consecutive ticks where the GPU supports them."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self.gpm = self._gpm_supported()
        self._prev_sample = pynvml.nvmlGpmSampleGet(handle, pynvml.nvmlGpmSampleAlloc()) if self.gpm else None

    def _gpm_supported(self) -> bool:
        try:
            return bool(pynvml.nvmlGpmQueryDeviceSupport(self.handle).isSupportedDevice)
        except Exception:
            return False

    def read(self) -> dict[str, float]:
        util = pynvml.nvmlDeviceGetUtilizationRates(self.handle)
        row = {
            "gpu_util_pct": float(util.gpu),
            "mem_ctrl_util_pct": float(util.memory),
            "mem_used_bytes": float(pynvml.nvmlDeviceGetMemoryInfo(self.handle).used),
            "power_w": pynvml.nvmlDeviceGetPowerUsage(self.handle) / 1000.0,
            "sm_clock_mhz": float(pynvml.nvmlDeviceGetClockInfo(self.handle, pynvml.NVML_CLOCK_SM)),
        }
        reasons = self._clock_reasons()
        if reasons is not None:
            row["clock_reasons"] = reasons
        if self.gpm:
            row.update(self._gpm_read())
        return row

    def _clock_reasons(self) -> int | None:
        """Why the SM clock is below its maximum now (NVML's bit mask); None where the driver cannot say."""
        read = (getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
                or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons)
        try:
            return int(read(self.handle))
        except pynvml.NVMLError:
            return None

    def processes(self) -> int | None:
        """How many processes hold this GPU (compute or graphics), this sweep's own included; None where
        NVML cannot list them. A container that hides other PID namespaces may list none at all."""
        try:
            listed = (pynvml.nvmlDeviceGetComputeRunningProcesses(self.handle)
                      + pynvml.nvmlDeviceGetGraphicsRunningProcesses(self.handle))
        except pynvml.NVMLError:
            return None
        return len({p.pid for p in listed})

    def _gpm_read(self) -> dict[str, float]:
        sample = pynvml.nvmlGpmSampleGet(self.handle, pynvml.nvmlGpmSampleAlloc())
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(GPM_METRICS)
        request.sample1, request.sample2 = self._prev_sample, sample
        for i, constant in enumerate(GPM_METRICS.values()):
            request.metrics[i].metricId = getattr(pynvml, constant)
        pynvml.nvmlGpmMetricsGet(request)
        pynvml.nvmlGpmSampleFree(self._prev_sample)
        self._prev_sample = sample
        values = {name: request.metrics[i].value for i, name in enumerate(GPM_METRICS)
                  if request.metrics[i].nvmlReturn == 0}
        return {name: v for name, v in values.items() if math.isfinite(v)}  # GPM reports NaN for empty intervals


class Sampler:
    """A daemon thread that appends one row per GPU per tick (one row on CPU); `drain()` hands them over.

    `gpus` > 1 samples the sweep's device and the next GPUs after it (one per rank of a multi-process
    sweep) from this one process, each row tagged with its `gpu_index`.
    """

    def __init__(self, device: torch.device, hz: float, t0: float, gpus: int = 1) -> None:
        self.period = 1.0 / hz
        self.t0 = t0
        self.context: tuple[int, str] = (-1, "idle")
        self.process = _ProcessProbe()
        first = device.index or 0
        indices = range(first, first + gpus) if device.type == "cuda" else []
        handles = [(i, nvml_handle(torch.device("cuda", i))) for i in indices]
        self.gpus = [(i, _GpuProbe(h)) for i, h in handles if h is not None]
        gpm = any(probe.gpm for _, probe in self.gpus)
        self.sources = ["proc"] + (["nvml"] if self.gpus else []) + (["gpm"] if gpm else [])
        self._rows: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="telemetry", daemon=True)

    def start(self) -> "Sampler":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def set_context(self, point_index: int, stage: str) -> None:
        """Close the old stage and open the new one with a sample each, so even a stage shorter than
        the sampling period (a tiny CPU batch) has its own numbers. Stage changes happen between
        timed repeats, never inside one, so the opening sample also lists the GPU's processes (too
        slow a call for every tick)."""
        self._take()
        self.context = (point_index, stage)
        self._take(processes=True)

    def peak_rss(self) -> int:
        """The highest resident memory seen since the last drain (the current point), or now."""
        with self._lock:
            return max([r["rss_bytes"] for r in self._rows if r["rss_bytes"] is not None] + [rss_bytes()])

    def memory_total(self) -> int | None:
        """The sampled GPUs' memory in all (NVML), or None when no GPU is sampled (a CPU, or no NVML)."""
        if not self.gpus:
            return None
        return sum(int(pynvml.nvmlDeviceGetMemoryInfo(probe.handle).total) for _, probe in self.gpus)

    def drain(self) -> list[dict[str, Any]]:
        with self._lock:
            rows, self._rows = self._rows, []
        return rows

    def _take(self, processes: bool = False) -> None:
        """One row from every probe (with `processes`, each GPU's process count too); under the lock
        because the probes keep state between reads."""
        with self._lock:
            base: dict[str, Any] = dict.fromkeys(SAMPLE_COLUMNS)
            base.update(self.process.read())
            now = time.perf_counter()
            base.update(host_t=now, t_s=now - self.t0, source=",".join(self.sources), gpu_index=None)
            base["point_index"], base["stage"] = self.context
            for index, probe in self.gpus:
                row = {**base, "gpu_index": index}
                try:
                    row.update(probe.read())
                    if processes:
                        row["gpu_processes"] = probe.processes()
                except Exception:
                    pass  # a transient NVML error loses one sample's GPU numbers, not the sweep
                self._rows.append(row)
            if not self.gpus:
                self._rows.append(base)

    def _loop(self) -> None:
        next_tick = time.perf_counter()
        while not self._stop.is_set():
            self._take()
            next_tick = max(next_tick + self.period, time.perf_counter())  # late ticks are skipped, not burst
            self._stop.wait(next_tick - time.perf_counter())
