"""Rank 0's engine for a multi-process sweep: each call goes to every rank, rank 0's own included.

Tensor parallel: every rank runs the same batch on its shard. Replicas: each rank runs its share of
the batch (runners.engines.replicas.split), all starting after one barrier. Every rank replies; an OOM or an
error on any rank becomes rank 0's exception, so the sweep records the point as it always does.
A cancel inside a call leaves the followers mid-collective: the engine is then broken and the sweep
ends them (parallel.Team.close).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from runners import cancel
from runners.engines import replicas
from runners.engines import make_engine
from runners.engines.base import Batch, Engine, Generation
from runners.engines.models import LoadedModel
from runners.engines.parallel import Command, Group
from runners.spec import SweepSpec

OOM_ERRORS = (torch.OutOfMemoryError, MemoryError)


@dataclass
class Reply:
    value: Any = None
    error: str | None = None
    oom: bool = False


def local_engine(spec: SweepSpec, loaded: LoadedModel, group: Group) -> Engine:
    """This rank's engine: a shard of `fast` for tensor parallel, a whole engine for a replica."""
    if spec.tensor_parallel > 1:
        from runners.engines.fast_tp import TensorParallelEngine

        return TensorParallelEngine(loaded, group.model)
    return make_engine(spec.engine, loaded)


def execute(engine: Engine, command: Command, group: Group) -> Reply:
    """Run one command on this rank; a failure comes back as a Reply so every rank stays in step."""
    try:
        arg = command.args[group.rank]
        if command.op == "setup":
            return Reply(engine.setup(*arg))
        if command.op == "generate":
            group.barrier()  # replicas start together; tensor-parallel ranks enter prefill together
            return Reply(engine.generate(arg))
        engine.release()
        return Reply()
    except cancel.Cancelled:
        raise
    except OOM_ERRORS as err:
        return Reply(error=_line(err), oom=True)
    except Exception as err:  # compilers wrap an OOM in their own errors: classify by the text
        return Reply(error=_line(err), oom="out of memory" in str(err).lower())


def _line(err: BaseException) -> str:
    return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"


def serve(engine: Engine, group: Group) -> None:
    """A follower's loop: run what rank 0 sends until it says stop."""
    while (command := group.broadcast()).op != "stop":
        group.gather(execute(engine, command, group))


class GroupEngine:
    """The Engine the sweep sees on rank 0."""

    def __init__(self, local: Engine, group: Group, tensor_parallel: bool) -> None:
        self.local, self.group, self.tensor_parallel = local, group, tensor_parallel
        self.name = local.name
        self.broken = False

    def version(self) -> str:
        return self.local.version() if self.tensor_parallel else f"{self.local.version()}; replicas {self.group.world}"

    def facts(self) -> dict[str, Any]:
        """Rank 0's: every rank holds the same shard sizes or the same whole model."""
        return self.local.facts()

    def setup(self, batch_size: int, max_prompt_len: int, max_output_len: int) -> float:
        sizes = [batch_size] * self.group.world if self.tensor_parallel else replicas.split_sizes(batch_size, self.group.world)
        return max(self._call(Command("setup", [(b, max_prompt_len, max_output_len) for b in sizes])))

    def generate(self, batch: Batch) -> Generation:
        parts = [batch] * self.group.world if self.tensor_parallel else replicas.split(batch, self.group.world)
        gens = self._call(Command("generate", parts))
        if not self.tensor_parallel:
            return replicas.combine(parts, gens)
        if any(g.tokens != gens[0].tokens for g in gens[1:]):
            raise RuntimeError("tensor-parallel ranks produced different greedy tokens")
        return gens[0]

    def release(self) -> None:
        if self.broken:
            self.local.release()
        else:
            self._call(Command("release", [None] * self.group.world))

    def _call(self, command: Command) -> list[Any]:
        if self.broken:
            raise RuntimeError("followers are out of step after an interrupted call")
        try:
            self.group.broadcast(command)
            replies = self.group.gather(execute(self.local, command, self.group))
        except BaseException:
            self.broken = True
            raise
        for rank, reply in enumerate(replies):
            if reply.error:
                raise (torch.OutOfMemoryError if reply.oom else RuntimeError)(f"rank {rank}: {reply.error}")
        return [reply.value for reply in replies]
