"""PartialSyncEngine: the step lifecycle every algorithm shares.

Per iteration t the training loop calls::

    engine.begin_iteration(t)     # fetch the algorithm's plan, zero gradients
    loss = model(batch); loss.backward()   # hooks launch UNIT_READY ops
    engine.end_backward()         # launch END_OF_BACKWARD ops, wait for those due now
    engine.step(optimizer, clip)  # clip + optimizer step
    engine.after_step()           # launch/wait AFTER_STEP ops, close the books

Algorithms that apply updates outside the plain step (dear, dreamddp with
``overlap_forward``) set ``owns_optimizer_step``: ``step`` then hands the
trainer's optimizer and clip value to ``algorithm.optimizer_step`` instead of
clipping and stepping itself; ``owns_grad_zeroing`` stops ``begin_iteration``
from zeroing gradients that a deferred update still has to read.

Gradient readiness comes from ``Tensor.register_post_accumulate_grad_hook``: a
unit is ready when all its parameters' gradients are accumulated, which is
also the moment autograd stops reading its parameters, so averaging them in
place from then on is safe (the DreamDDP paper's argument).  Ops that complete
BEFORE_FORWARD are waited for in the forward pre-hook of their first unit to
run in the next iteration: ``op.last``, the input-side end of the run.

The engine does no per-parameter Python work per step beyond the autograd
hooks themselves (one counter decrement each): gradients are zeroed, clipped
and synchronised on flat buffers.
"""

from __future__ import annotations

import functools

import torch
from torch import nn

from dreamddp.clock import clock_for
from dreamddp.engine.flat import FlatModel
from dreamddp.engine.plan import Payload, Plan, SyncOp, When
from dreamddp.engine.stats import IterationStats
from dreamddp.engine.units import Unit


class PartialSyncEngine:
    def __init__(self, model: nn.Module, units: list[Unit], comm, algorithm, *, sample_every: int = 0):
        self.model = model
        self.units = units
        self.comm = comm
        self.algorithm = algorithm
        self.flat = FlatModel(units)
        self.clock = clock_for(self.flat.params.device)  # device-synchronised stamps on CUDA
        self.sample_every = sample_every  # record per-unit timelines every k iterations (0: never)
        self.t = -1
        self.stats = IterationStats(-1)
        self._plan_index: dict[int, tuple] = {}  # id(plan) -> (triggers, remaining template)
        self._missing_template = [len(u.params) for u in units]
        self._ready = [0.0] * len(units)
        self._pending: dict[When, list] = {w: [] for w in When}
        self._before_forward: dict[int, list] = {}
        self._hooks = [
            p.register_post_accumulate_grad_hook(functools.partial(self._on_grad_ready, u.index))
            for u in units
            for p in u.params
        ]
        self._forward_hooked = False
        self.set_algorithm(algorithm)

    def set_algorithm(self, algorithm) -> None:
        """Switch algorithms between iterations (after warm-up passes, for example)."""
        if self.t >= 0:
            self.flush()
        self.algorithm = algorithm
        self._plan_index.clear()
        if algorithm.uses_forward_hooks and not self._forward_hooked:
            for u in self.units:
                mod = self.model.get_submodule(u.name)
                self._hooks.append(mod.register_forward_pre_hook(functools.partial(self._before_unit_forward, u.index)))
            self._forward_hooked = True
        algorithm.bind(self)

    # ---- lifecycle -------------------------------------------------------
    def begin_iteration(self, t: int) -> None:
        self.t = t
        self.plan: Plan = self.algorithm.plan(t)
        key = id(self.plan)
        if key not in self._plan_index:
            self._plan_index[key] = self._index(self.plan)
        self._triggers, template = self._plan_index[key]
        self._remaining = list(template)
        self._launched = [False] * len(self.plan)
        self._missing = list(self._missing_template)
        self.stats = IterationStats(t, sampled=bool(self.sample_every) and t % self.sample_every == 0)
        self._stamp_ready = self.stats.sampled
        self.stats.start = self.clock()
        if not self.algorithm.owns_grad_zeroing:
            self.flat.zero_grads()

    def end_backward(self) -> None:
        self.stats.backward_end = self.clock()
        for i, op in enumerate(self.plan):
            if not self._launched[i] and op.launch in (When.UNIT_READY, When.END_OF_BACKWARD):
                # UNIT_READY ops whose units got no gradient this step still sync.
                self._launch(i)
        self._wait(When.END_OF_BACKWARD)

    def step(self, optimizer: torch.optim.Optimizer, grad_clip: float = 0.0) -> None:
        if self.algorithm.owns_optimizer_step:
            # The algorithm applies (or defers) the update itself, clipping included.
            self.algorithm.optimizer_step(self, optimizer, grad_clip)
            return
        if grad_clip > 0:
            self.stats.grad_norm = self.flat.clip_grad_norm_(grad_clip)
        self.algorithm.before_step(self)
        optimizer.step()
        self.algorithm.after_optimizer_step(self)

    def after_step(self) -> IterationStats:
        for i, op in enumerate(self.plan):
            if not self._launched[i] and op.launch is When.AFTER_STEP:
                self._launch(i)
        self._wait(When.AFTER_STEP)
        for rec in self.comm.drain():
            self.stats.add_record(rec)
        self.stats.end = self.clock()
        if self.stats.sampled:
            self.stats.unit_ready = [r - self.stats.start for r in self._ready]
        return self.stats

    def flush(self) -> None:
        """Complete everything in flight (before evaluation, checkpointing or exit)."""
        for when in When:
            self._wait(when)
        for u in list(self._before_forward):
            self._complete_before_forward(u)
        self.algorithm.flush(self)

    def close(self) -> None:
        self.flush()
        for h in self._hooks:
            h.remove()
        self._hooks.clear()

    # ---- tensors ----------------------------------------------------------
    def tensor(self, op: SyncOp) -> torch.Tensor:
        if op.payload is Payload.GRAD:
            return self.flat.grad_slice(op.first, op.last)
        return self.flat.param_slice(op.first, op.last)

    # ---- internals ---------------------------------------------------------
    def _index(self, plan: Plan):
        triggers: dict[int, list[int]] = {}
        template = []
        for i, op in enumerate(plan):
            template.append(op.last - op.first + 1 if op.launch is When.UNIT_READY else -1)
            if op.launch is When.UNIT_READY:
                for u in op.units:
                    triggers.setdefault(u, []).append(i)
        return triggers, template

    def _on_grad_ready(self, u: int, _param: torch.Tensor) -> None:
        self._missing[u] -= 1
        if self._missing[u]:
            return
        if self._stamp_ready:  # sampled iterations only: on CUDA a stamp synchronises
            self._ready[u] = self.clock()
        for i in self._triggers.get(u, ()):
            self._remaining[i] -= 1
            if self._remaining[i] == 0:
                self._launch(i)

    def _launch(self, i: int) -> None:
        op = self.plan[i]
        self._launched[i] = True
        handle = self.algorithm.launch(self, op, self.tensor(op))
        if op.complete is When.BEFORE_FORWARD:
            # Keyed by op.last: units run forward in reverse backward order, so the
            # input-side end of the run is the first whose forward needs the result.
            self._before_forward.setdefault(op.last, []).append((op, handle))
        else:
            self._pending[op.complete].append((op, handle))

    def _wait(self, when: When) -> None:
        pending, self._pending[when] = self._pending[when], []
        for op, handle in pending:
            self.stats.wait += handle.wait()
            self.algorithm.on_complete(self, op)

    def complete_before_forward(self, u: int) -> None:
        """Complete now the BEFORE_FORWARD ops keyed at unit ``u`` (no-op if none)."""
        if u in self._before_forward:
            self._complete_before_forward(u)

    def _complete_before_forward(self, u: int) -> None:
        for op, handle in self._before_forward.pop(u, ()):
            self.stats.wait += handle.wait()
            self.algorithm.on_complete(self, op)

    def _before_unit_forward(self, u: int, _module, _args) -> None:
        if u in self._before_forward:
            self._complete_before_forward(u)
        self.algorithm.before_unit_forward(self, u)
