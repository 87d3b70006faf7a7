"""Stepping a SUBSET of the parameters with the trainer's own optimizer.

Algorithms that apply a unit's update at a different moment from the rest of
the model (dear: each fused group just before its next forward; dreamddp with
``overlap_forward``: each in-flight unit once its average lands) still use the
optimizer the trainer built from ``train.optimizer``.  A :class:`SubsetStepper`
is an optimizer of the same class over a subset of its parameters that SHARES
the trainer optimizer's ``state`` dict (momentum buffers, Adam moments, step
counts), so no optimizer state is duplicated, ``optimizer.state_dict()`` still
checkpoints everything, and stepping every subset once equals one full step
for element-wise optimizers (SGD, momentum, Adam, AdamW) exactly.

Hyperparameters (the learning rate under a schedule, ...) are taken from a
:func:`snapshot` of the trainer optimizer's param groups made at the moment
the trainer called ``engine.step``, so an update applied in the next forward
still uses the learning rate of the iteration whose gradient it applies.
"""

from __future__ import annotations

import inspect
import time

import torch

_stepped = 0.0  # seconds this process spent in SubsetStepper.step (engine.py leaves them out of an op's books)


def stepped_seconds() -> float:
    return _stepped


def snapshot(optimizer: torch.optim.Optimizer) -> list[dict]:
    """The hyperparameters of every param group now (everything but ``params``)."""
    return [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]


class SubsetStepper:
    def __init__(self, optimizer: torch.optim.Optimizer, params: list[torch.Tensor]):
        wanted = {id(p) for p in params}
        groups, self.index = [], []
        for i, g in enumerate(optimizer.param_groups):
            mine = [p for p in g["params"] if id(p) in wanted]
            if mine:
                groups.append({**{k: v for k, v in g.items() if k != "params"}, "params": mine})
                self.index.append(i)
        covered = sum(len(g["params"]) for g in groups)
        if covered != len(wanted):
            raise ValueError(f"SubsetStepper: {len(wanted) - covered} parameter(s) are not in the optimizer")
        cls = type(optimizer)
        # The groups carry every hyperparameter; pass only the constructor's own
        # keywords (defaults may hold keys the constructor does not take).
        accepted = inspect.signature(cls.__init__).parameters
        kwargs = {k: v for k, v in optimizer.defaults.items() if k in accepted}
        self.opt = cls(groups, **kwargs) if groups else None
        if self.opt is not None:
            self.opt.state = optimizer.state  # shared: one copy of the optimizer state

    def step(self, hyper: list[dict]) -> None:
        global _stepped
        if self.opt is None:
            return
        t0 = time.perf_counter()
        for g, i in zip(self.opt.param_groups, self.index):
            g.update(hyper[i])
        self.opt.step()
        _stepped += time.perf_counter() - t0


def mark_stepped(optimizer: torch.optim.Optimizer) -> None:
    """Tell torch's LR scheduler that the trainer optimizer's step happened (through
    its subsets), so ``scheduler.step()`` does not warn it was called first."""
    optimizer._opt_called = True  # the flag torch's own step wrapper sets


def unit_params(engine, units) -> list[torch.Tensor]:
    """The parameters of the given unit indices (any order, no duplicates)."""
    return [p for u in sorted(set(units)) for p in engine.units[u].params]
