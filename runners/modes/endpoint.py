"""The endpoint mode: every point sends the continuous mode's seeded workload to a running
OpenAI-compatible server, by arrival rate or clients, and measures what comes back (docs/design.md §3).

No model is loaded here: the spec's model names the shapes the server runs (prompt ids are drawn in its
vocabulary; its facts feed the roofline). Telemetry samples a local GPU through NVML when the server runs
on this host. A point may restart the server from the user's command; failed requests are counted, and a
point whose server answers nothing is an error, never the end of the sweep.
"""
from __future__ import annotations

import dataclasses
import json
import os
import socket
import statistics
import time
from urllib.parse import urlsplit

import torch

from runners.engines import devices, models
from runners.engines.endpoint import Capabilities, EndpointClient
from runners.engines.negotiate import negotiate
from runners.engines.server_command import ServerProcess
from runners.metrics.endpoint import EndpointRepeat, endpoint_repeat, summarise
from runners.metrics.interval import Interval, by_draws
from runners.metrics.summary import Summary
from runners.metrics.utilisation import Window
from runners.modes.context import PointContext, Stages
from runners.modes.continuous import load, load_columns
from runners.results import contract
from runners.results.runfolder import RunWriter
from runners.spec import SweepSpec
from runners.spec.endpoint import EndpointPoint, server_argv
from runners.telemetry import fingerprint
from runners.telemetry.telemetry import Sampler
from runners.workload import workload

LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "0.0.0.0"}


def run_point(ctx: PointContext, index: int, point: EndpointPoint) -> Summary:
    """Setup (the server's restart and the capability probes), warm-up and measured repeats under the
    failure guard (PointContext.run; the context has no engine, so no memory split)."""
    return ctx.run(index, point, EndpointRun(ctx, index, point))


def is_local(url: str) -> bool:
    """Whether the server's host is this machine (so its GPU can be sampled)."""
    host = urlsplit(url).hostname or ""
    return host in LOCAL_HOSTS or host.startswith("127.") or host in (socket.gethostname(), socket.getfqdn())


def telemetry_device(spec: SweepSpec) -> torch.device:
    """The GPU to sample: the one named, or with auto the first GPU when the server is local; else the CPU
    (this process only)."""
    if spec.device == "auto":
        return torch.device("cuda", 0) if torch.cuda.is_available() and is_local(spec.url) else torch.device("cpu")
    return devices.resolve(spec.device)


def api_key(spec: SweepSpec) -> str | None:
    """The key from the environment variable the spec names (the key itself is never written anywhere)."""
    if not spec.api_key_env:
        return None
    key = os.environ.get(spec.api_key_env)
    if not key:
        raise RuntimeError(f"api_key_env names {spec.api_key_env}, which is not set in the runner's environment")
    return key


def context(spec: SweepSpec, device: torch.device, folder: RunWriter, sampler: Sampler, stage: Stages) -> PointContext:
    """The model's facts from its config (no weights), and the run's env and model files; a key variable
    that is not set fails the sweep here, before any point."""
    api_key(spec)
    info = models.describe(spec.model, models.model_config(spec.model), spec.dtype)
    labels = f"; server: {spec.server_labels}" if spec.server_labels else ""
    version = f"endpoint {spec.url} model {spec.model_name or '(first listed)'}{labels}"
    folder.write_json(contract.ENV, fingerprint.collect(device, version))
    folder.write_json(contract.MODEL, dataclasses.asdict(info))
    folder.log(f"endpoint {spec.url}: prompts in the shapes of {info.name} (vocab {info.vocab:,}); "
               f"telemetry on {device}{labels}; no calibration (the server's device is not this process's)")
    return PointContext(spec, torch.device("cpu"), info, None, folder, sampler, stage)


class EndpointRun:
    """One point's server (restarted when the spec has a command) and client."""

    def __init__(self, ctx: PointContext, index: int, point: EndpointPoint) -> None:
        spec = ctx.spec
        self.ctx, self.index, self.point = ctx, index, point
        self.work, self.arrivals = load(ctx, point)
        self.client = EndpointClient(spec.url, spec.model_name, api_key(spec), spec.request_timeout_s)
        self.server = (ServerProcess(server_argv(spec, point), ctx.folder.root / contract.SERVER_LOG)
                       if spec.server_command else None)
        self.columns = load_columns(point)

    def setup(self) -> float:
        """Restart the server (when the spec has a command) and wait for it, find the model, and negotiate
        how requests are made (runners.engines.negotiate); the seconds it took are setup, never inside a
        latency."""
        spec, log = self.ctx.spec, self.ctx.folder.log
        start = time.perf_counter()
        if self.server is not None:
            try:
                self.server.start(self.client.ready, spec.ready_timeout_s)
            except OSError as err:
                raise RuntimeError(f"cannot start the server command: {err}") from None
            log(f"point {self.index}: server started (pid {self.server.pid}): {' '.join(self.server.argv)}")
        listed = self.client.models()
        if spec.model_name and spec.model_name not in listed:
            raise RuntimeError(f"the server does not serve {spec.model_name!r}; it lists {', '.join(listed)}")
        self.client.model = spec.model_name or listed[0]
        sample = self.work[min(self.work)].prompt_ids[0][:8]
        caps = negotiate(self.client, spec.api, spec.prompt_format, sample, workload.text_prompt(sample),
                         lambda line: log(f"point {self.index}: {line}"))
        self._record(caps)
        self.client.caps = caps
        return time.perf_counter() - start

    def _record(self, caps: Capabilities) -> None:
        """The first point's capabilities go into env.json (`endpoint`, and the engine line the fingerprint
        shows); a later point whose server answers differently is an error, so one run's points were all
        measured the same way."""
        folder = self.ctx.folder
        env = json.loads((folder.root / contract.ENV).read_text())
        if env.get("endpoint") is None:
            folder.write_json(contract.ENV, {**env, "endpoint": caps.to_dict(),
                                             "engine": f"{env['engine']}; {caps.describe()}"})
            folder.log(f"point {self.index}: requests: {caps.describe()}")
        elif env["endpoint"] != caps.to_dict():
            raise RuntimeError(f"the server now takes requests otherwise than at the first point: "
                               f"{caps.describe()}; recorded: {Capabilities(**env['endpoint']).describe()}")

    @property
    def text(self) -> bool:
        """Prompts go as text (the chat API, or a server that refused token ids)."""
        return self.client.caps is not None and self.client.caps.prompt == "text"

    def repeat(self, run: int, draw: int) -> tuple[EndpointRepeat, Window]:
        spec, batch = self.ctx.spec, self.work[draw]
        prompts = [workload.text_prompt(p) for p in batch.prompt_ids] if self.text else batch.prompt_ids
        served = self.client.run(prompts, batch.output_lens, {**self.arrivals, "seed": workload.arrival_seed(spec, draw)},
                                 f"{self.ctx.folder.root.name}/p{self.index}/r{run}")
        # the server's phases are not seen from here, so a measured repeat's samples are all tagged decode
        window = Window(run, served.start, served.start, served.start + served.end_s)
        return endpoint_repeat(self.index, run, self.point.batch_size, served, batch.prompt_lens,
                               batch.output_lens, spec.slo_metric, spec.slo_ms), window

    def interval(self, draws: list[EndpointRepeat]) -> Interval:
        """A draw is the whole request set sent to the server, whose steps are unseen: draws alone."""
        return by_draws([rep.row["output_tokens_per_s"] for rep in draws])

    def summarise(self, repeats: list[EndpointRepeat]) -> Summary:
        spec = self.ctx.spec
        return summarise(self.index, self.point.batch_size, repeats, spec.warmup, spec.slo_metric, spec.slo_ms)

    def release(self) -> None:
        if self.server is not None:
            self.server.stop()

    def done(self, summary: Summary) -> str:
        line = (f"{summary['output_tokens_per_s']:.1f} out tok/s, goodput {summary['goodput_rps']:.2f} req/s, "
                f"{summary['active_seqs_mean']:.1f} requests in flight")
        if self.text:
            drawn = statistics.fmean(n for r, b in self.work.items() if r >= 0 for n in b.prompt_lens)
            line += (f"; prompts sent as text: the server counted {summary['prompt_len_mean']:.1f} tokens a prompt "
                     f"for {drawn:.1f} words")
        if self.client.caps.length == "none":
            drawn = statistics.fmean(n for r, b in self.work.items() if r >= 0 for n in b.output_lens)
            line += (f"; output lengths not forced: the server generated {summary['output_len_mean']:.1f} tokens a "
                     f"request for {drawn:.1f} drawn")
        if summary["error"]:
            line += f"; {summary['error']}"
        return line
