"""The engine's interface around torch DDP, which synchronises by itself.

Used only by ``algo=ddp``, the numerical reference: it offers the same
lifecycle calls as PartialSyncEngine so the training loop has one shape, and
accounts the bytes DDP all-reduces (every gradient, every iteration).  DDP's
waiting happens inside backward and cannot be separated from it here.
"""

from __future__ import annotations

import time

import torch
from torch import nn

from dreamddp.engine.stats import IterationStats
from dreamddp.engine.units import Unit


class DDPEngine:
    def __init__(self, ddp_model: nn.Module, units: list[Unit]):
        self.model = ddp_model
        self.units = units
        self.params = [p for u in units for p in u.params]
        self._bytes = sum(u.nbytes for u in units)
        self.stats = IterationStats(-1)

    def begin_iteration(self, t: int) -> None:
        self.stats = IterationStats(t)
        self.stats.start = time.perf_counter()
        for p in self.params:  # set_to_none would free DDP's bucket views each step
            if p.grad is not None:
                p.grad.zero_()

    def end_backward(self) -> None:
        self.stats.backward_end = time.perf_counter()

    def step(self, optimizer: torch.optim.Optimizer, grad_clip: float = 0.0) -> None:
        if grad_clip > 0:
            self.stats.grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, grad_clip, foreach=True))
        optimizer.step()

    def after_step(self) -> IterationStats:
        self.stats.bytes = self._bytes
        self.stats.collectives = 1
        self.stats.end = time.perf_counter()
        return self.stats

    def flush(self) -> None: ...

    def close(self) -> None: ...
