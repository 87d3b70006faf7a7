"""The algorithm interface: a plan per iteration plus optional policy hooks.

An algorithm never touches communication or timing directly: it tells the
engine WHAT to synchronise and WHEN (a :mod:`dreamddp.engine.plan`), and may
override ``launch`` (e.g. to use a different collective) and the lifecycle
callbacks.  Plans are built once in :meth:`bind` and reused, so the hot path
does no planning work.
"""

from __future__ import annotations

from typing import Any

from dreamddp.engine.plan import Plan, SyncOp


class Algorithm:
    name = "base"
    uses_engine = True  # False: the model syncs itself (torch DDP)
    uses_forward_hooks = False  # True: engine installs per-unit forward pre-hooks
    owns_optimizer_step = False  # True: engine.step calls optimizer_step() instead of clip + optimizer.step()
    owns_grad_zeroing = False  # True: begin_iteration leaves the flat gradient buffer alone

    def __init__(self, cfg: Any):
        self.cfg = cfg

    def bind(self, engine) -> None:
        """Called once by the engine; precompute plans from ``engine.units``."""

    def plan(self, t: int) -> Plan:
        raise NotImplementedError(f"{type(self).__name__} must define plan()")

    def launch(self, engine, op: SyncOp, tensor):
        tag = f"{op.payload.value}:{engine.units[op.first].name}" if op.first == op.last else f"{op.payload.value}:{op.first}-{op.last}"
        if op.collective != "all_reduce":
            raise ValueError(f"{self.name}: collective {op.collective!r} needs its own launch()")
        return engine.comm.all_reduce_avg(tensor, tag=tag)

    def optimizer_step(self, engine, optimizer, grad_clip: float) -> None:
        """Only for algorithms with ``owns_optimizer_step`` (e.g. DeAR's per-group updates)."""
        raise TypeError(f"{type(self).__name__} sets owns_optimizer_step but defines no optimizer_step()")

    # Lifecycle callbacks (no-ops by default).
    def on_complete(self, engine, op: SyncOp) -> None: ...
    def before_step(self, engine) -> None: ...
    def after_optimizer_step(self, engine) -> None: ...
    def before_unit_forward(self, engine, unit: int) -> None: ...
    def flush(self, engine) -> None: ...

    def state_dict(self) -> dict:
        """State a checkpoint must carry beyond model, optimizer and data (taken after
        ``engine.flush()``).  Plans that are a function of the iteration need none."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore ``state_dict()`` after :meth:`bind`."""
        if state:
            raise ValueError(f"{self.name}: checkpoint holds algorithm state {sorted(state)} it cannot take")

    def describe(self) -> dict:
        """What the run record should know about this algorithm's set-up."""
        return {"name": self.name}

    def sync_iterations(self, unit: int, H: int) -> list[int]:
        """Iterations in [0, H) in which ``unit`` is synchronised (for tests and records)."""
        return [t for t in range(H) if any(unit in op.units for op in self.plan(t))]
