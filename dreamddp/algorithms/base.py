"""The algorithm interface: one class per algorithm, and everything about it in its module.

An algorithm module holds one :class:`Algorithm` subclass registered with
``@ALGORITHMS.register``.  The class owns:

- ``Config``: its dataclass of ``algo.*`` options, one comment per field (Hydra
  types ``algo`` with it, so a key another algorithm owns is refused);
- ``check(cfg)``: the rules on those options, one line naming the field;
  ``check_model(cfg, layout)``: rules that need the model's units (a schedule file);
- ``prepare(cfg, warmup)``: its warm-up needs (DreamDDP profiles and schedules),
  returning a JSON-able ``setup`` that the constructor takes and checkpoints keep;
- ``bind_plan(layout)`` / ``plan(t)``: its communication, stated once (WHAT to
  synchronise and WHEN, in the vocabulary of :mod:`dreamddp.engine.plan`),
  built from a torch-free view of the units (names, bytes, world).  The engine
  executes it; the simulator (schedule/simulator.py) binds the same object to
  a profile's units and times the same ops: there is no second description;
- ``launch`` / ``on_complete`` / lifecycle callbacks: the tensor work of its
  ops (the default launch averages the op's slice in place);
- ``display``: how results tables and figures name and order it.

An algorithm never touches communication or timing directly: it tells the
engine what to synchronise and when, and may override ``launch`` (e.g. to use
another collective).  Plans are built once in :meth:`bind_plan` and reused,
so the hot path does no planning work.  Modules import torch lazily
(dreamddp.lazy): the planning library simulates algorithms without loading it.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

from omegaconf import MISSING

from dreamddp.checks import at_least
from dreamddp.engine.layout import UnitLayout
from dreamddp.engine.plan import Payload, Plan, SyncOp
from dreamddp.registry import Registry


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
    # Tables and figures name an algorithm by its algo.name (a variant such as
    # dreamddp+overlap included), the name a user types to run it.
    order: int  # position in tables and legends (lower first)
    periodic: bool = False  # syncs once per H-window, so runs are labelled by H
    authors_key: str | None = None  # the DreamDDP artifact's name for it (modelled_times.json)


ALGORITHMS: Registry = Registry("algorithm", "algo.name")


class Algorithm:
    name: ClassVar[str] = "base"
    Config: ClassVar[type] = AlgoConfig
    display: ClassVar[Display] = Display(999)
    # True: the model synchronises itself (torch DDP), outside our communicator: the link
    # cannot pace it and its traffic is not in a plan, so the simulator cannot time it.
    syncs_itself: ClassVar[bool] = False
    # False: make_engine runs the model without the partial-sync engine (plain, DDP), so the
    # start-up profile, which times units through the engine, cannot measure it.
    on_engine: ClassVar[bool] = True
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
    def window_rule(cls, cfg) -> Callable[[int, float, int], bool] | None:
        """For the simulator: ``takes(pos, elapsed, steps)``, whether a worker computes window
        position ``pos`` after ``elapsed`` seconds and ``steps`` steps of its window, where
        ``steps_at`` depends on the worker's own clock (flsgd_timed); None: every iteration."""
        return None

    @classmethod
    def setup_from_profile(cls, cfg, profile, alpha: float = 0.0) -> dict:
        """What ``prepare`` would return had its warm-up measured ``profile`` (torch-free: the
        simulator builds the algorithm from it).  ``alpha``: seconds one collective costs."""
        return {}

    @classmethod
    def setup_from_schedule(cls, H: int, schedule: dict, collectives=None, delayed=None) -> dict:
        """The set-up of a ``scheduled`` algorithm that runs ``schedule`` (unit -> iterations,
        and its collectives and late collectives as [first, last] unit names per iteration,
        or None)."""
        raise TypeError(f"algo={cls.name}: takes no schedule")

    @classmethod
    def variant(cls, cfg) -> str:
        """The name results tables give a run of this algorithm (``cfg``: a run record's
        ``config.algo`` mapping); options that make it another method may show here."""
        return cls.name

    @classmethod
    def build(cls, cfg, setup: dict | None = None) -> "Algorithm":
        # An option may select a subclass registered with ALGORITHMS.register_variant
        # (dreamddp's overlap_forward), which this class's module does not import.
        return ALGORITHMS.resolve(cls, cfg)(cfg, setup)

    @classmethod
    def merges_late(cls, cfg) -> bool:
        """True: some of its averages land iterations after their launch (the emulated link's
        ``carrier=auto`` then starts what is queued as each iteration ends: comm/links/emulated.py)."""
        return False

    @classmethod
    def optimizer_name(cls, cfg, train) -> str:
        """The optimizer the trainer builds (``train.optimizer`` unless the method says otherwise)."""
        return train.optimizer

    # ---- how the trainer runs the model ----
    @classmethod
    def make_engine(cls, model, units, comm, ctx, *, cfg, sample_every: int, grad_clip: float = 0.0):
        """The engine the trainer drives and the module it runs forward/backward on: the
        partial-sync engine on the model itself (starting with nothing to sync: warm-up
        passes run first, then ``set_algorithm``), with every replica starting from rank
        0's parameters, as DDP does (``grad_clip``: train.grad_clip, which plans may depend
        on; ``cfg``: the run's ``algo`` options).  Algorithms that sync by themselves override it."""
        from dreamddp.engine.engine import PartialSyncEngine

        # By its registry name: nosync.py subclasses this module, so importing it here is a circle
        idle = ALGORITHMS.lookup("nosync")
        engine = PartialSyncEngine(model, units, comm, idle(idle.Config(name="nosync")), sample_every=sample_every,
                                   grad_clip=grad_clip)
        comm.broadcast(engine.flat.params, src=0)
        return engine, model

    def __init__(self, cfg: Any, setup: dict | None = None):
        type(self).check(cfg)
        self.cfg = cfg
        self.setup = dict(setup or {})

    # ---- its communication: the plan ----
    def bind_plan(self, layout: UnitLayout) -> None:
        """Precompute the plans from the units (names, bytes, world); no tensors here."""

    def plan(self, t: int) -> Plan:
        return ()

    def payload_place(self, op: SyncOp, t: int, layout: UnitLayout) -> tuple[object, int]:
        """Where ``op``'s collective (launched in iteration ``t``) works: (buffer, byte offset).
        The plan does not say it and the deferred carrier's grouping depends on it (adjacent
        slices merge), so the simulator asks here.  Default: gradients and parameters on the
        engine's flat buffers; a payload made at launch, a buffer of its own."""
        if op.payload is Payload.GRAD:
            return "grads", layout.op_offset(op)
        if op.payload is Payload.PARAM:
            return "params", layout.op_offset(op)
        return ("made at launch", t, op), 0

    # ---- engine side: the tensor work ----
    def bind(self, engine) -> None:
        """Called once by the engine: the plans from its units, then any tensors of its own."""
        self.engine = engine
        self.bind_plan(engine.layout)

    def launch(self, engine, op: SyncOp):
        """Start ``op``'s collective and return its handle (default: average the op's slice in place)."""
        if op.collective != "all_reduce":
            raise ValueError(f"{self.name}: collective {op.collective!r} needs its own launch()")
        return engine.comm.all_reduce_avg(engine.tensor(op), tag=op_tag(engine, op))

    def optimizer_step(self, engine, optimizer, grad_clip: float) -> None:
        """Only for algorithms with ``owns_optimizer_step`` (e.g. DeAR's per-group updates)."""
        raise TypeError(f"{type(self).__name__} sets owns_optimizer_step but defines no optimizer_step()")

    # ---- trainer side ----
    def steps_at(self, t: int) -> bool:
        """Whether this worker computes iteration ``t`` (asked by the trainer before each one).
        False: the trainer takes no batch and no step and runs nothing of the engine, so an
        iteration this returns False for must have an empty plan (a timed window's idle tail:
        flsgd_timed).  Every worker still passes through every iteration, in step with the others."""
        return True

    def iteration_record(self) -> dict:
        """Keys this algorithm adds to the iteration's row of the run record (after its step)."""
        return {}

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

    def check_saved_size(self, what: str, saved: int, ours: int) -> None:
        """State shaped like the engine's flat buffers must fit this run's buffers, which on CUDA
        pad each parameter to an aligned start (``engine/flat.py``) and on the CPU do not."""
        if saved != ours:
            raise ValueError(f"{self.name}: the checkpoint's {what} holds {saved} elements where this run's flat "
                             f"buffers hold {ours}: resume on the kind of device it was saved on (CUDA's buffers "
                             "are padded, the CPU's packed)")

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


def op_tag(engine, op: SyncOp, prefix: str | None = None) -> str:
    """The accounting tag of an op's collective: ``param:<unit name>`` for one unit,
    ``param:<first>-<last>`` for a run, ``#k/n`` after it for part k of n."""
    kind = prefix or op.payload.value
    tag = f"{kind}:{engine.units[op.first].name}" if op.first == op.last and not op.more else f"{kind}:{op.first}-{op.last}"
    return tag if op.part[1] == 1 else f"{tag}#{op.part[0]}/{op.part[1]}"


class Landed:
    """The handle of a transfer completed before a checkpoint was taken (``Engine.adopt``)."""

    def wait(self) -> float:
        return 0.0
