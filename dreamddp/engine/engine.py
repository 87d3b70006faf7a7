"""PartialSyncEngine: the step lifecycle every algorithm shares.

Per iteration t the training loop calls::

    engine.begin_iteration(t)     # fetch the algorithm's plan, zero gradients
    loss = model(batch); loss.backward()   # hooks launch UNIT_READY ops
    engine.end_backward()         # launch END_OF_BACKWARD ops, wait for those due now
    engine.step(optimizer)        # clip (at the engine's grad_clip) + optimizer step
    engine.after_step()           # launch/wait AFTER_STEP ops, close the books

Each op of the plan is launched at its launch point (``algorithm.launch``
makes the collective) and completed at its completion point, ``op.lag``
iterations later (the handle is waited for, then ``algorithm.on_complete``);
forward pre-hooks, when the algorithm asks for them, serve BEFORE_FORWARD
launches and completions.  Algorithms that apply updates outside the plain
step (dear, dreamddp with ``overlap_forward``) set ``owns_optimizer_step``:
``step`` then hands the trainer's optimizer and the engine's clip value to
``algorithm.optimizer_step`` instead of clipping and stepping itself;
``owns_grad_zeroing`` stops ``begin_iteration`` from zeroing gradients that a
deferred update still has to read.

Gradient readiness comes from ``Tensor.register_post_accumulate_grad_hook``: a
unit is ready when all its parameters' gradients are accumulated, which is
also the moment autograd stops reading its parameters, so averaging them in
place from then on is safe (the DreamDDP paper's argument).  Ops that complete
BEFORE_FORWARD are waited for in the forward pre-hook of their first unit to
run: ``op.last``, the input-side end of the run.

``flush`` (before evaluation, a checkpoint, exit) completes whatever a forward
pre-hook would (the parameters must be whole), but for ops due at the end of
backward or after the step of a LATER iteration it only lets the transfer
land: their ``on_complete`` still runs at the iteration the plan says, so how
often a run evaluates never changes its trajectory.

The engine does no per-parameter Python work per step beyond the autograd
hooks themselves (one counter decrement each): gradients are zeroed, clipped
and synchronised on flat buffers.
"""

from __future__ import annotations

import functools
import time

import torch
from torch import nn

from dreamddp.clock import Stamps, clock_for
from dreamddp.engine import substep
from dreamddp.engine.divergence import divergence
from dreamddp.engine.flat import FlatModel
from dreamddp.engine.layout import UnitLayout
from dreamddp.engine.plan import Payload, Plan, SyncOp, When, part_bounds
from dreamddp.engine.stats import IterationStats, land
from dreamddp.engine.units import Unit

PLAN_CACHE = 256  # distinct plan tuples indexed at once (an algorithm's window has H of them)


class PartialSyncEngine:
    def __init__(self, model: nn.Module, units: list[Unit], comm, algorithm, *, sample_every: int = 0,
                 align_bytes: int | None = None, grad_clip: float = 0.0):
        self.model = model
        self.units = units
        self.comm = comm
        self.algorithm = algorithm
        self.flat = FlatModel(units, align_bytes, model)  # None: aligned as the device's own tensors are
        # grad_clip: the trainer's train.grad_clip, the one value both the plan (a plan may sync
        # for the clip norm: layout.py) and ``step`` read
        self.layout = UnitLayout(tuple(u.name for u in units), self.flat.unit_nbytes,
                                 frozenset(n for n, _ in model.named_modules() if n), comm.world_size,
                                 self.flat.params.element_size(), grad_clip)
        self.clock = clock_for(self.flat.params.device)  # device-synchronised stamps on CUDA
        self.sample_every = sample_every  # record per-unit timelines every k iterations (0: never)
        self.t = -1
        self.stats = IterationStats(-1)
        # id(plan) -> (plan, triggers, remaining template, forward launches): a plan tuple is indexed
        # once; the entry holds the plan, so its id is not reused while cached (an algorithm that
        # builds a fresh tuple each iteration gets a fresh index, the cache cleared at PLAN_CACHE)
        self._plan_index: dict[int, tuple] = {}
        self._missing_template = [len(u.params) for u in units]
        self._ready = Stamps(len(units), self.flat.params.device)  # per-unit gradient readiness (sampled)
        # In flight, by where they complete: (iteration, When) -> [(op, handle)], and
        # (iteration, unit) -> [(op, handle)] for BEFORE_FORWARD completions.
        self._due: dict[tuple[int, When], list] = {}
        self._due_forward: dict[tuple[int, int], list] = {}
        self._hooks = [
            p.register_post_accumulate_grad_hook(functools.partial(self._on_grad_ready, u.index))
            for u in units
            for p in u.params
        ]
        self._forward_hooked = False
        self._landing: list[tuple[dict, object, float]] = []  # sampled events still in flight
        self.optimizer = None  # the trainer's, from its first step (the pipeline's moments stage reads it)
        self.set_algorithm(algorithm)

    def set_algorithm(self, algorithm) -> None:
        """Switch algorithms between iterations (after warm-up passes, for example)."""
        if self.t >= 0:
            self.flush()
        if waiting := self.in_flight():  # late averages: the old algorithm's merge, the new one's would misapply them
            raise RuntimeError(f"set_algorithm: {len(waiting)} collective(s) of {type(self.algorithm).__name__} are "
                               f"still to merge (from iteration {min(due for due, _ in waiting)}: algo.merge_delay); "
                               "switch once they have")
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
        entry = self._plan_index.get(id(self.plan))
        if entry is None or entry[0] is not self.plan:
            if len(self._plan_index) >= PLAN_CACHE:
                self._plan_index.clear()
            entry = self._plan_index[id(self.plan)] = (self.plan, *self._index(self.plan))
        _, self._triggers, template, self._forward_launch = entry
        self._remaining = list(template)
        self._launched = [False] * len(self.plan)
        self._missing = list(self._missing_template)
        self.stats = IterationStats(t, sampled=bool(self.sample_every) and t % self.sample_every == 0)
        self._stamp_ready = self.stats.sampled
        self.stats.start = self.clock()
        self._stepped_at_start = substep.stepped_seconds()
        if self._stamp_ready:
            self._ready.begin(self.stats.start)
        if not self.algorithm.owns_grad_zeroing:
            self.flat.zero_grads()
        for i in self._forward_launch.get(None, ()):
            self._launch(i)

    def end_backward(self) -> None:
        self.stats.backward_end = self.clock()
        self.stats.forward_steps = substep.stepped_seconds() - self._stepped_at_start
        for i, op in enumerate(self.plan):
            if not self._launched[i] and op.launch is not When.AFTER_STEP:
                # Ops whose units got no gradient (or skipped their forward) this step still sync.
                self._launch(i)
        for key in [k for k in self._due_forward if k[0] <= self.t]:  # their forward pre-hook did not run
            self._complete(self._due_forward.pop(key))
        self._wait(When.END_OF_BACKWARD)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer
        grad_clip = self.layout.grad_clip
        if self.algorithm.owns_optimizer_step:
            # The algorithm applies (or defers) the update itself, clipping included.
            self.algorithm.optimizer_step(self, optimizer, grad_clip)
            return
        if grad_clip > 0:
            self.stats.grad_norm = self.flat.clip_grad_norm_(grad_clip)
        self.algorithm.before_step(self)
        optimizer.step()
        if self.algorithm.window is not None:
            self.algorithm.window.stepped()

    def after_step(self) -> IterationStats:
        for i, op in enumerate(self.plan):
            if not self._launched[i] and op.launch is When.AFTER_STEP:
                self._launch(i)
        self._wait(When.AFTER_STEP)
        self.comm.end_iteration()
        for rec in self.comm.drain():
            event = self.stats.add_record(rec)
            if event is not None and event["complete"] is None:
                self._landing.append((event, rec, self.stats.start))
        self._land_events()
        self.stats.end = self.clock()
        if self.stats.sampled:
            self.stats.unit_ready = self._ready.read()  # after the synchronising end stamp
        return self.stats

    def flush(self) -> None:
        """Complete what a forward pre-hook or this iteration would; let later merges land only."""
        for key in list(self._due_forward):
            self._complete(self._due_forward.pop(key))
        for key in list(self._due):
            if key[0] <= self.t:
                self._complete(self._due.pop(key))
            else:
                for _, handle in self._due[key]:
                    self.stats.wait += handle.wait()  # landed; on_complete at its iteration
        self.algorithm.flush(self)
        if getattr(self.algorithm, "window", None) is not None:  # time outside the steps is not the window's
            self.algorithm.window.pause()

    def land_all(self) -> None:
        """The run's end: complete now every op still in flight, late merges and outer steps
        included (there is no later iteration for them), after a ``flush``, so replicas end
        synced as the plan would have left them."""
        self.flush()
        now = self.t
        try:
            for key in sorted(self._due, key=lambda k: (k[0], k[1].order)):
                self.t = key[0]  # the iteration it was due in: on_complete finds its launch from there
                self._complete(self._due.pop(key))
        finally:
            self.t = now

    def _land_events(self) -> None:
        """Sampled events of collectives that completed after their iteration's record was
        handed out (late merges, forward completions): filled in place, in the row that holds them."""
        self._landing = [entry for entry in self._landing if not land(*entry)]

    def close(self) -> None:
        self.land_all()
        self._land_events()
        for h in self._hooks:
            h.remove()
        self._hooks.clear()

    def divergence(self) -> dict:
        """Per-unit parameter divergence across workers (engine/divergence.py)."""
        return divergence(self.flat)

    # ---- in flight across a checkpoint ---------------------------------------
    def in_flight(self) -> list[tuple[int, SyncOp]]:
        """Ops launched but not completed (after ``flush``: landed, merged later), with the
        iteration they complete in."""
        return [(key[0], op) for key, entries in self._due.items() for op, _ in entries]

    def adopt(self, iteration: int, op: SyncOp, handle) -> None:
        """Take over an op in flight from a checkpoint: completed at ``op.complete`` of ``iteration``."""
        self._due.setdefault((iteration, op.complete), []).append((op, handle))

    # ---- tensors ----------------------------------------------------------
    def tensor(self, op: SyncOp) -> torch.Tensor:
        if op.payload is Payload.GRAD:
            whole = self.flat.grad_slice(op.first, op.last)
        elif op.payload is Payload.PARAM:
            whole = self.flat.param_slice(op.first, op.last)
        else:
            raise ValueError(f"{self.algorithm.name}: a {op.payload.value} payload is made by its own launch()")
        if op.part[1] == 1:
            return whole
        lo, hi = part_bounds(whole.numel(), op.part)
        return whole[lo:hi]

    # ---- internals ---------------------------------------------------------
    def _index(self, plan: Plan):
        triggers: dict[int, list[int]] = {}
        forward: dict[int | None, list[int]] = {}
        template = []
        for i, op in enumerate(plan):
            ready = op.launch is When.UNIT_READY
            template.append(len(op.units) if ready else -1)
            if ready:
                for u in op.units:
                    triggers.setdefault(u, []).append(i)
            elif op.launch is When.BEFORE_FORWARD:
                forward.setdefault(op.at, []).append(i)
        return triggers, template, forward

    def _on_grad_ready(self, u: int, _param: torch.Tensor) -> None:
        self._missing[u] -= 1
        if self._missing[u]:
            return
        if self._stamp_ready:  # sampled iterations only (on CUDA an event: the device runs on)
            self._ready.mark(u)
        for i in self._triggers.get(u, ()):
            self._remaining[i] -= 1
            if self._remaining[i] == 0:
                self._launch(i)

    def _launch(self, i: int) -> None:
        op = self.plan[i]
        self._launched[i] = True
        b0 = self._books()
        handle = self.algorithm.launch(self, op)
        self.stats.launch_host += self._books() - b0
        self.stats.ops.append(op)
        due = self.t + op.lag
        if op.complete is When.BEFORE_FORWARD:
            # Keyed by op.last: units run forward in reverse backward order, so the
            # input-side end of the run is the first whose forward needs the result.
            self._due_forward.setdefault((due, op.last), []).append((op, handle))
        else:
            self._due.setdefault((due, op.complete), []).append((op, handle))

    def _complete(self, entries: list) -> None:
        for _, handle in entries:
            self.stats.wait += handle.wait()
        self._on_complete([op for op, _ in entries])

    def _on_complete(self, ops: list[SyncOp]) -> None:
        b0 = self._books()
        for op in ops:
            self.algorithm.on_complete(self, op)
        self.stats.complete_host += self._books() - b0
        self.stats.completed += len(ops)

    def _books(self) -> float:
        """A clock of the engine's host work on its ops: the host's, less what is timed apart.
        A wait inside an algorithm's launch (DeAR's all-gather waits for its reduce-scatter)
        is a wait; an op completed inside another's launch counts once, as a completion; an
        optimizer step (a DeAR group's, an overlapped unit's) is the step's, which the
        simulator charges as the step, not as the op's books."""
        s = self.stats
        return time.perf_counter() - s.wait - s.launch_host - s.complete_host - substep.stepped_seconds()

    def _wait(self, when: When) -> None:
        for key in [k for k in self._due if k[1] is when and k[0] <= self.t]:
            self._complete(self._due.pop(key))

    def complete_before_forward(self, u: int) -> None:
        """Complete now the BEFORE_FORWARD ops of unit ``u`` (no-op if none)."""
        for key in [k for k in self._due_forward if k[1] == u]:
            self._complete(self._due_forward.pop(key))

    def _before_unit_forward(self, u: int, _module, _args) -> None:
        due = self._due_forward.pop((self.t, u), None)
        if due:  # wait, launch what this pre-hook launches, then apply (the link stays busy)
            for _, handle in due:
                self.stats.wait += handle.wait()
        for i in self._forward_launch.get(u, ()):
            if not self._launched[i]:  # once per iteration: an evaluation forward launches nothing
                self._launch(i)
        if due:
            self._on_complete([op for op, _ in due])
        self.algorithm.before_unit_forward(self, u)
