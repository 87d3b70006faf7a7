"""The algorithm interface: one class per algorithm, and everything about it in its module.

An algorithm module holds one :class:`Algorithm` subclass registered with
``@ALGORITHMS.register``.  The class owns:

- ``Config``: its dataclass of ``algo.*`` options, one comment per field (Hydra
  types ``algo`` with it, so a key another algorithm owns is refused);
- ``check(cfg)``: the rules on those options, one line naming the field;
  ``check_model(cfg, layout)``: rules that need the model's units (a schedule file);
- ``prepare(cfg, warmup)``: its warm-up needs (DreamDDP profiles and schedules),
  returning a JSON-able ``setup`` that the constructor takes and checkpoints keep;
- ``plan(t)`` / ``launch`` / lifecycle callbacks: its engine plan (WHAT to
  synchronise and WHEN, in the vocabulary of :mod:`dreamddp.engine.plan`);
- ``simulation(ctx)``: its simulator plan, ``t -> IterPlan``;
- ``display``: how results tables and figures name and order it.

An algorithm never touches communication or timing directly: it tells the
engine what to synchronise and when, and may override ``launch`` (e.g. to use
another collective).  Plans are built once in :meth:`bind` and reused, so the
hot path does no planning work.  Modules import torch lazily (dreamddp.lazy):
the planning library simulates algorithms without loading it.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

from omegaconf import MISSING

from dreamddp.checks import at_least
from dreamddp.engine.plan import Plan, SyncOp
from dreamddp.registry import Registry
from dreamddp.schedule.simulator import PlanFn, SimContext


@dataclass
class AlgoConfig:
    # Registry name in dreamddp.algorithms.ALGORITHMS; each conf/algo yaml sets its own.
    name: str = MISSING
    # Window in iterations: the sync period of the periodic algorithms (every unit syncs at
    # least once per H); the others use it only as the period of the per-unit timelines
    # kept in the run record.
    H: int = 10


@dataclass(frozen=True)
class Display:
    label: str  # name in tables and figures
    order: int  # position in tables and legends (lower first)
    periodic: bool = False  # syncs once per H-window, so runs are labelled by H
    authors_key: str | None = None  # the DreamDDP artifact's name for it (modelled_times.json)


ALGORITHMS: Registry = Registry("algorithm", "algo.name")


class Algorithm:
    name: ClassVar[str] = "base"
    Config: ClassVar[type] = AlgoConfig
    display: ClassVar[Display] = Display("base", 999)
    uses_engine: ClassVar[bool] = True  # False: the model syncs itself (torch DDP)
    uses_forward_hooks: ClassVar[bool] = False  # True: engine installs per-unit forward pre-hooks
    owns_optimizer_step: ClassVar[bool] = False  # True: engine.step calls optimizer_step() instead of clip + step
    owns_grad_zeroing: ClassVar[bool] = False  # True: begin_iteration leaves the flat gradient buffer alone
    scheduled: ClassVar[bool] = False  # True: its per-iteration assignment is a scheduler's output (a schedule)

    # ---- configuration and set-up (class level: before any instance exists) ----
    @classmethod
    def check(cls, cfg) -> None:
        """Refuse bad ``algo.*`` values (ConfigError, one line naming the field)."""
        at_least("algo.H", cfg.H, 1)

    @classmethod
    def check_model(cls, cfg, layout: Callable[[], Any]) -> None:
        """Rules that need the model: ``layout()`` gives its unit and module names (built
        on the meta device, so call it only when needed)."""

    @classmethod
    def prepare(cls, cfg, warmup) -> dict:
        """Warm-up needs, run on the live job before training (``dreamddp.warmup.Warmup``);
        the returned set-up is passed to the constructor and kept by checkpoints."""
        return {}

    @classmethod
    def simulation(cls, ctx: SimContext) -> PlanFn | None:
        """The simulator's plan ``t -> IterPlan`` (None: this algorithm is not simulated)."""
        return None

    @classmethod
    def variant(cls, cfg) -> str:
        """The name results tables give a run of this algorithm (``cfg``: a run record's
        ``config.algo`` mapping); options that make it another method may show here."""
        return cls.name

    @classmethod
    def build(cls, cfg, setup: dict | None = None) -> "Algorithm":
        return cls(cfg, setup)

    @classmethod
    def optimizer_name(cls, cfg, train) -> str:
        """The optimizer the trainer builds (``train.optimizer`` unless the method says otherwise)."""
        return train.optimizer

    # ---- algorithms that do not run on the engine (uses_engine = False) ----
    @classmethod
    def wrap_model(cls, model, ctx):
        """The module the trainer runs forward/backward on (torch DDP wraps the model)."""
        return model

    @classmethod
    def bytes_per_iteration(cls, units) -> int:
        """What the wrapper sends per iteration, for the record (the engine counts its own)."""
        return 0

    def __init__(self, cfg: Any, setup: dict | None = None):
        type(self).check(cfg)
        self.cfg = cfg
        self.setup = dict(setup or {})

    # ---- engine side ----
    def bind(self, engine) -> None:
        """Called once by the engine; precompute plans from ``engine.units``."""

    def plan(self, t: int) -> Plan:
        return ()

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

    @contextmanager
    def evaluation(self, engine):
        """The parameters evaluation sees while inside (default: this worker's replica)."""
        yield

    def sync_iterations(self, unit: int, H: int) -> list[int]:
        """Iterations in [0, H) in which ``unit`` is synchronised (for tests and records)."""
        return [t for t in range(H) if any(unit in op.units for op in self.plan(t))]
