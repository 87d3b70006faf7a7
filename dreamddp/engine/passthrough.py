"""The engine's interface around a model that synchronises by itself, or not at all.

Used by the algorithms that do not run on the partial-sync engine (``ddp``:
torch DDP, the numerical reference; ``plain``: a bare model, the baseline of
the engine's own cost): it offers the same lifecycle calls as
PartialSyncEngine so the training loop has one shape, and accounts the bytes
the wrapper says it sends per iteration (DDP: every gradient).  DDP's waiting
happens inside backward and cannot be separated from it here.
"""

from __future__ import annotations

import torch
from torch import nn

from dreamddp.clock import clock_for
from dreamddp.engine.stats import IterationStats
from dreamddp.engine.units import Unit


class PassthroughEngine:
    def __init__(self, model: nn.Module, units: list[Unit], bytes_per_iteration: int, grad_clip: float = 0.0):
        self.model = model
        self.grad_clip = grad_clip  # train.grad_clip (0: none)
        self.units = units
        self.params = [p for u in units for p in u.params]
        self._bytes = bytes_per_iteration
        self.clock = clock_for(self.params[0].device)
        self.stats = IterationStats(-1)

    def begin_iteration(self, t: int) -> None:
        self.stats = IterationStats(t)
        self.stats.start = self.clock()
        # zeroed in place, as optimizer.zero_grad(set_to_none=False) does (one foreach kernel, not one
        # per tensor): set_to_none would free DDP's bucket views each step
        grads = [p.grad for p in self.params if p.grad is not None]
        if grads:
            torch._foreach_zero_(grads)

    def end_backward(self) -> None:
        self.stats.backward_end = self.clock()

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        if self.grad_clip > 0:
            self.stats.grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.grad_clip, foreach=True)
        optimizer.step()

    def after_step(self) -> IterationStats:
        self.stats.bytes = self._bytes
        self.stats.collectives = int(self._bytes > 0)
        self.stats.end = self.clock()
        return self.stats

    def set_algorithm(self, algorithm) -> None:
        """Nothing to bind: the model synchronises itself, or not at all."""
        self.algorithm = algorithm

    def divergence(self) -> None:
        """Not measured: no flat buffers here (DDP's replicas never diverge)."""
        return None

    def flush(self) -> None: ...

    def land_all(self) -> None: ...
    def close(self) -> None: ...
