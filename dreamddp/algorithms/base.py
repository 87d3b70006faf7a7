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
from typing import Any, Callable, ClassVar, Optional

from omegaconf import MISSING

from dreamddp.checks import at_least
from dreamddp.engine.layout import UnitLayout
from dreamddp.engine.pipeline import Landed, Pipeline
from dreamddp.engine.plan import Payload, Plan, SyncOp
from dreamddp.engine.stages import CODEC_KEYS, StageConfig, check_stages, chosen
from dreamddp.registry import Registry


@dataclass
class AlgoKeys:
    # Registry name in dreamddp.algorithms.ALGORITHMS; each conf/algo yaml sets its own.
    name: str = MISSING
    # Window in iterations: the sync period of the periodic algorithms (every unit syncs at
    # least once per H); the others use it only as the period of the per-unit timelines
    # kept in the run record.
    H: int = 10
    # The named method a conf/algo recipe yaml composes from this algorithm and the stages
    # (diloco, sparseloco, ...): how results name the run; None: the algorithm itself.
    recipe: Optional[str] = None


@dataclass
class AlgoConfig(StageConfig, AlgoKeys):
    """An algorithm's keys (name, H, recipe first), then the sync stages' (engine/stages.py)."""


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
    # What its plan sends, for the sync stages (engine/stages.py): param | grad | none | own
    syncs: ClassVar[str] = "none"
    # Why timing=late/eager cannot apply (the plan lands its syncs on a timing of its own), or None
    fixed_timing: ClassVar[str | None] = None
    # Why it cannot run on a mesh with shards > 1 (FSDP2 inside each replica: engine/mesh.py),
    # or None: its ops then work on each rank's local shards over the replicate group
    on_shards: ClassVar[str | None] = None

    # ---- configuration and set-up (class level: before any instance exists) ----
    @classmethod
    def check(cls, cfg) -> None:
        """Refuse bad ``algo.*`` values (ConfigError, one line naming the field), the sync
        stages this algorithm's plan cannot take included."""
        at_least("algo.H", cfg.H, 1)
        check_stages(cfg, cls.name, cls.syncs, fixed_timing=cls.fixed_timing)

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
    def window_policy(cls, cfg):
        """A wall-clock window (engine/window.py) that decides which iterations a worker computes
        (flsgd_timed), the one the trainer, the engine and the simulator share; None: every one."""
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
        ``config.algo`` mapping): its recipe's, else options that make it another method."""
        return cfg.get("recipe") or cls.name

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
        self.sync = Pipeline(cfg, getattr(cfg, "alpha", 0.0))  # the stages every op passes through
        self.window = type(self).window_policy(cfg)  # None: the worker computes every iteration

    # ---- its communication: the plan ----
    def make_plan(self, layout: UnitLayout) -> None:
        """Precompute the plans from the units (names, bytes, world); no tensors here."""

    def base_plan(self, t: int) -> Plan:
        """Iteration t's ops as the algorithm states them (the pipeline's stages not yet applied)."""
        return ()

    def bind_plan(self, layout: UnitLayout) -> None:
        """The plans on ``layout``, then the pipeline's view of them."""
        self.make_plan(layout)
        self.sync.bind_plan(self.base_plan, layout)

    def plan(self, t: int) -> Plan:
        """Iteration t's ops as they travel: the engine runs them, the simulator times them."""
        return self.sync.plan(self.base_plan(t), t)

    def payload_place(self, op: SyncOp, t: int, layout: UnitLayout) -> tuple[object, int]:
        """Where ``op``'s collective (launched in iteration ``t``) works: (buffer, byte offset).
        The plan does not say it and the deferred carrier's grouping depends on it (adjacent
        slices merge), so the simulator asks here.  Default: gradients and parameters on the
        engine's flat buffers; a payload made at launch, a buffer of its own."""
        copy = self.sync.place(op, t, layout)
        if copy is not None:
            return copy
        if op.payload is Payload.GRAD:
            return "grads", layout.op_offset(op)
        if op.payload is Payload.PARAM:
            return "params", layout.op_offset(op)
        return ("made at launch", t, op), 0

    # ---- engine side: the tensor work ----
    def bind(self, engine) -> None:
        """Called once by the engine: the plans from its units, then the pipeline's tensors."""
        self.engine = engine
        self.bind_plan(engine.layout)
        self.sync.bind(engine)

    def launch(self, engine, op: SyncOp):
        """Start ``op``'s collective through the pipeline and return its handle."""
        return self.sync.launch(engine, op, op_tag(engine, op, self.sync.prefix(op)))

    def optimizer_step(self, engine, optimizer, grad_clip: float) -> None:
        """Only for algorithms with ``owns_optimizer_step`` (e.g. DeAR's per-group updates)."""
        raise TypeError(f"{type(self).__name__} sets owns_optimizer_step but defines no optimizer_step()")

    # ---- trainer side ----
    def iteration_record(self) -> dict:
        """Keys this algorithm adds to the iteration's row of the run record (after its step)."""
        return {}

    def on_complete(self, engine, op: SyncOp) -> None:
        self.sync.on_complete(engine, op)

    # Lifecycle callbacks (no-ops by default).
    def before_step(self, engine) -> None: ...
    def before_unit_forward(self, engine, unit: int) -> None: ...
    def flush(self, engine) -> None: ...

    def state_dict(self) -> dict:
        """State a checkpoint must carry beyond model, optimizer and data (taken after
        ``engine.flush()``): the pipeline's (anchors, residuals, outer optimizer, what is in flight)."""
        sync = self.sync.state_dict()
        return {"sync": sync} if sync else {}

    def load_state_dict(self, state: dict) -> None:
        """Restore ``state_dict()`` after :meth:`bind`."""
        state = dict(state)
        self.sync.load_state_dict(state.pop("sync", {}), self.check_saved_size)
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
        """What the run record should know about this algorithm's set-up (and its stages)."""
        out = {"name": self.name}
        if self.cfg.recipe:
            out["recipe"] = self.cfg.recipe
        out.update({f"sync.{k}": getattr(self.cfg, k) for k in chosen(self.cfg)})
        if self.sync.codec is not None:
            out.update({k: getattr(self.cfg, k) for k in CODEC_KEYS})
        return out

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
