"""DreamDDP with ``algo.overlap_forward=true`` (our extension: DeAR's trick applied
to DreamDDP's exposed tail).

Plain dreamddp (partial.py) waits at the end of backward for every parameter
average it launched, then steps all units.  Here the averages are NOT waited
for at the end of backward; per iteration t (phase h = t mod H, synced set S_h):

1. backward: each unit u in S_h launches the in-place average of its
   parameters from its gradient-ready hook (unchanged);
2. ``engine.step`` (owned): clip the LOCAL gradients as plain dreamddp does,
   snapshot the optimizer's hyperparameters, step every unit NOT in S_h at
   once (one optimizer call over their parameters) and zero their gradients;
   the units in S_h keep their gradients, their parameters are still on the wire;
3. when an average lands (the next forward pre-hook of its input-side unit, the
   engine's BEFORE_FORWARD completion, or ``flush``), apply its units' deferred
   step with the saved gradients and the snapshot hyperparameters, in one
   optimizer call (the op's ``SyncOp.steps``, which the simulator charges
   there, after the wait), then zero their gradients.

Numerics: for u in S_h the order is average -> local step, for the rest just
the local step, exactly as plain dreamddp; only the moment changes.  With an
element-wise optimizer (SGD, momentum, Adam, AdamW; substep.py shares the
trainer optimizer's state) the parameters equal plain dreamddp's
(tests/test_overlap_forward.py: allclose after several windows).  No model copy;
the only extra state is that S_h's gradients live until the next forward.

What it hides: the link is FIFO and input-side units launch last but run
first in forward, so the gain is bounded by the optimizer step of the unsynced
units plus the forward of every unit before the first one still in flight.
The scheduler plans for it (``make_plan(overlap=True)``): each average due at
its unit's forward pre-hook, not at the end of backward, so a window can sync
more of the input side in one iteration than the paper's model allows.
"""

from __future__ import annotations

from dreamddp.algorithms.base import ALGORITHMS
from dreamddp.algorithms.dreamddp import DreamDDP
from dreamddp.engine.plan import contiguous_runs
from dreamddp.schedule.delay import is_late
from dreamddp.lazy import lazy

substep = lazy("dreamddp.engine.substep")


@ALGORITHMS.register_variant("overlap_forward")
class DreamDDPOverlap(DreamDDP):
    """A variant, not a member: building dreamddp picks it for ``algo.overlap_forward=true``."""

    uses_forward_hooks = True
    owns_optimizer_step = True
    owns_grad_zeroing = True

    def bind(self, engine) -> None:
        super().bind(engine)
        everyone = set(range(len(engine.units)))
        self.rest = [sorted(everyone - set(g)) for g in self.inplace]  # merged-late units step at once
        self.rest_runs = [contiguous_runs(r) for r in self.rest]
        self.steppers = None
        self.op_steppers: dict[tuple[int, ...], object] = {}  # an average's units -> their stepper
        self.deferred: set[int] = set()  # units whose step waits for their average
        self.landed: set[int] = set()  # averages completed before this iteration's step
        engine.flat.zero_grads()  # from here on the algorithm zeroes (warm-up passes left gradients)

    def launch(self, engine, op):
        # Never two collectives on one buffer: finish the previous average of any of the
        # op's units (and its deferred step) first.  Only hit when a unit skipped its
        # forward (unused unit).
        for u in op.units:
            engine.complete_before_forward(u)
        return super().launch(engine, op)

    def optimizer_step(self, engine, optimizer, grad_clip: float) -> None:
        if grad_clip > 0:
            engine.stats.grad_norm = engine.flat.clip_grad_norm_(grad_clip)
        if self.steppers is None:
            self.optimizer = optimizer
            self.steppers = [substep.SubsetStepper(optimizer, substep.unit_params(engine, r)) for r in self.rest]
        self.hyper = substep.snapshot(optimizer)
        substep.mark_stepped(optimizer)
        h = engine.t % self.H
        self.steppers[h].step(self.hyper)
        for a, b in self.rest_runs[h]:
            engine.flat.grad_slice(a, b).zero_()
        self.deferred = set(self.inplace[h])
        early = self.landed & self.deferred
        if early:  # rare: completed early (a flush mid-iteration)
            self._step_units(engine, sorted(early))
        self.landed.clear()

    def on_complete(self, engine, op) -> None:
        if is_late(op):  # a copy averaged late: the pipeline merges it
            return super().on_complete(engine, op)
        due = [u for u in op.units if u in self.deferred]
        self.landed.update(u for u in op.units if u not in self.deferred)
        if due:
            self._step_units(engine, due)

    def _step_units(self, engine, units: list[int]) -> None:
        """One optimizer call over ``units`` (a plan has few distinct averages: their steppers
        are made once), then their gradients zeroed."""
        key = tuple(units)
        stepper = self.op_steppers.get(key)
        if stepper is None:
            stepper = self.op_steppers[key] = substep.SubsetStepper(self.optimizer, substep.unit_params(engine, units))
        stepper.step(self.hyper)
        for a, b in contiguous_runs(units):
            engine.flat.grad_slice(a, b).zero_()
        self.deferred.difference_update(units)

    def describe(self) -> dict:
        return {**super().describe(), "overlap_forward": True}
