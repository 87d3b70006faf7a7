"""DreamDDP: partial parameter averaging on a profiled schedule.

The mechanism is PLSGD's (partial.py); the assignment of units to iterations
comes from a schedule: the DreamDDP scheduler's output on a profile of the
live job (DFS plus bubble filling, so a unit may sync more than once per
window), or a file (``algo.schedule``).  ``prepare`` makes it during warm-up,
before the algorithm exists; the constructor takes it as its set-up
(``{"schedule": {"source", "H", "schedule"}}``, which the run record and
checkpoints keep).  With
``algo.overlap_forward`` the averages still in flight at the step finish
behind the next forward instead (dreamddp_overlap.py).

Numerics: as PLSGD (partial.py): the average lands on the parameters before
the local update, which then applies the local gradient on top.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from dreamddp.algorithms.base import ALGORITHMS, AlgoConfig, Display
from dreamddp.algorithms.partial import PartialParamSync
from dreamddp.checks import ConfigError
from dreamddp.lazy import lazy
from dreamddp.schedule.cost import groups as schedule_groups
from dreamddp.schedule.make import make_schedule
from dreamddp.schedule.schedule_file import ScheduleError, assign_units, read_schedule
from dreamddp.schedule.simulator import IterPlan

units_mod = lazy("dreamddp.engine.units")


@dataclass
class DreamDDPConfig(AlgoConfig):
    # Path to a schedule JSON ({"H": H, "schedule": {module: iteration(s)}}, the authors'
    # format); None = profile the live job at start-up, then schedule.
    schedule: Optional[str] = None
    # Add the scheduler's bubble-filling extra syncs of output-side units where the
    # modelled link idles (the paper's step after the DFS); false = the DFS alone.
    bubble_fill: bool = True
    # Do not wait for parameter averages at the end of backward; each in-flight unit's
    # update is applied when its average lands, at the latest in the unit's next forward
    # pre-hook (same numerics as plain dreamddp; our extension, dreamddp_overlap.py).
    overlap_forward: bool = False


@ALGORITHMS.register
class DreamDDP(PartialParamSync):
    name = "dreamddp"
    Config = DreamDDPConfig
    display = Display("DreamDDP", 80, periodic=True, authors_key="dream_ddp")
    scheduled = True

    @classmethod
    def check_model(cls, cfg, layout) -> None:
        """A schedule file must fit the model: read, H, every unit, every iteration."""
        if not cfg.schedule:
            return
        try:
            H, schedule = read_schedule(cfg.schedule)
            if H != cfg.H:
                raise ScheduleError(f"{cfg.schedule}: the schedule's H={H} is not algo.H={cfg.H}")
            unit_names, module_names = layout()
            assign_units(schedule, H, unit_names, module_names, cfg.schedule)
        except ScheduleError as e:
            raise ConfigError(f"algo.schedule={e}") from None

    @classmethod
    def prepare(cls, cfg, warmup) -> dict:
        """The schedule: from ``algo.schedule``, or profiled and scheduled on the live job."""
        if cfg.schedule:
            H, schedule = read_schedule(cfg.schedule)
            source = cfg.schedule
        else:
            profile = warmup.profile()
            H, schedule = cfg.H, make_schedule(profile, cfg.H, "dreamddp", bubble=cfg.bubble_fill)
            warmup.save_schedule(H, schedule)
            source = "profiled"
        return {"schedule": {"source": source, "H": H, "schedule": schedule}}

    @classmethod
    def build(cls, cfg, setup: dict | None = None):
        if cfg.overlap_forward:
            from dreamddp.algorithms.dreamddp_overlap import DreamDDPOverlap

            return DreamDDPOverlap(cfg, setup)
        return cls(cfg, setup)

    def __init__(self, cfg, setup: dict | None = None):
        super().__init__(cfg, setup)
        if "schedule" not in self.setup:
            raise ScheduleError("algo=dreamddp: no schedule in its set-up (give algo.schedule or let warm-up profile)")
        made = self.setup["schedule"]
        if made["H"] != cfg.H:
            raise ScheduleError(f"algo.H={cfg.H} does not match the schedule's H={made['H']}")
        self.schedule: dict[str, list[int]] = made["schedule"]
        self.source = made.get("source", "schedule")

    def assignment(self, engine) -> list[list[int]]:
        names = [u.name for u in engine.units]
        modules = {n for n, _ in engine.model.named_modules()} | set(units_mod.leaf_module_names(engine.model))
        return assign_units(self.schedule, self.cfg.H, names, modules, self.source)

    @classmethod
    def sim_groups(cls, ctx) -> list[list[int]]:
        schedule = make_schedule(ctx.with_link_comm(), ctx.H, "dreamddp", bubble=ctx.cfg.bubble_fill)
        return schedule_groups(ctx.profile, ctx.H, schedule)

    @classmethod
    def simulation(cls, ctx):
        if not ctx.cfg.overlap_forward:
            return super().simulation(ctx)
        # Each average is waited for in its unit's next forward pre-hook.
        window = schedule_groups(ctx.profile, ctx.H, ctx.schedule) if ctx.schedule is not None else cls.sim_groups(ctx)
        plans = [IterPlan(deferred=[(i, c, i) for i, c in ctx.per_unit(g)]) for g in window]
        return lambda t: plans[t % ctx.H]

    @classmethod
    def variant(cls, cfg) -> str:
        return "dreamddp+overlap" if cfg.get("overlap_forward") else cls.name

    def describe(self) -> dict:
        return {**super().describe(), "schedule_source": self.source}
