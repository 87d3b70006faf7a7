"""DreamDDP: partial parameter averaging on a profiled schedule.

The mechanism is PLSGD's (partial.py); the assignment of units to iterations
comes from a schedule: a scheduler's output on a profile of the live job
(``algo.scheduler``: the paper's DFS plus bubble filling by default, so a unit
may sync more than once per window; ``general`` assignments with their own
collectives, schedule/make.py), or a file (``algo.schedule``).  ``prepare`` makes it during warm-up,
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
from dreamddp.checks import ConfigError, choice
from dreamddp.lazy import lazy
from dreamddp.schedule.cost import groups as schedule_groups
from dreamddp.schedule.make import make_plan
from dreamddp.schedule.schedule_file import ScheduleError, assign_runs, assign_units, read_schedule_file
from dreamddp.schedule.simulator import IterPlan

units_mod = lazy("dreamddp.engine.units")


SCHEDULERS = ("dreamddp", "optimal", "general")


@dataclass
class DreamDDPConfig(AlgoConfig):
    # Path to a schedule JSON ({"H": H, "schedule": {module: iteration(s)}}, the authors'
    # format, optionally with "collectives"); None = profile the live job at start-up, then schedule.
    schedule: Optional[str] = None
    # What plans the profiled schedule: dreamddp (the paper's DFS over contiguous splits,
    # for reproduction) | optimal (the exact optimum over contiguous splits) | general (any
    # subset per iteration, grouped into collectives, each charged the link's measured alpha).
    scheduler: str = "dreamddp"
    # Add the scheduler's bubble-filling extra syncs of output-side units where the
    # modelled link idles (the paper's step after the DFS); false = the DFS alone.
    # Contiguous schedulers only (general plans its own use of the link).
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
    def check(cls, cfg) -> None:
        super().check(cfg)
        choice("algo.scheduler", cfg.scheduler, SCHEDULERS)

    @classmethod
    def check_model(cls, cfg, layout) -> None:
        """A schedule file must fit the model: read, H, every unit, every iteration."""
        if not cfg.schedule:
            return
        try:
            H, schedule, collectives = read_schedule_file(cfg.schedule)
            if H != cfg.H:
                raise ScheduleError(f"{cfg.schedule}: the schedule's H={H} is not algo.H={cfg.H}")
            unit_names, module_names = layout()
            groups = assign_units(schedule, H, unit_names, module_names, cfg.schedule)
            if collectives is not None:
                assign_runs(collectives, groups, unit_names, cfg.schedule)
        except ScheduleError as e:
            raise ConfigError(f"algo.schedule={e}") from None

    @classmethod
    def prepare(cls, cfg, warmup) -> dict:
        """The schedule: from ``algo.schedule``, or profiled and scheduled on the live job."""
        if cfg.schedule:
            H, schedule, collectives = read_schedule_file(cfg.schedule)
            source = cfg.schedule
        else:
            profile = warmup.planning_profile(warmup.profile())
            H = cfg.H
            schedule, collectives = make_plan(profile, H, cfg.scheduler, cfg.bubble_fill, warmup.link_alpha)
            warmup.save_schedule(H, schedule, collectives)
            source = f"profiled ({cfg.scheduler})"
        made = {"source": source, "H": H, "schedule": schedule}
        if collectives is not None:
            made["collectives"] = [[list(r) for r in its] for its in collectives]
        return {"schedule": made}

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
        collectives = made.get("collectives")
        self.schedule_runs = None if collectives is None else [[tuple(r) for r in its] for its in collectives]

    def assignment(self, engine) -> list[list[int]]:
        names = [u.name for u in engine.units]
        modules = {n for n, _ in engine.model.named_modules()} | set(units_mod.leaf_module_names(engine.model))
        return assign_units(self.schedule, self.cfg.H, names, modules, self.source)

    def collectives(self, engine) -> list[list[tuple[int, int]]]:
        if self.schedule_runs is None:
            return super().collectives(engine)
        return assign_runs(self.schedule_runs, self.groups, [u.name for u in engine.units], self.source)

    @classmethod
    def sim_window(cls, ctx):
        schedule, collectives = make_plan(ctx.with_link_comm(), ctx.H, ctx.cfg.scheduler, ctx.cfg.bubble_fill,
                                          ctx.alpha_s)
        window = schedule_groups(ctx.profile, ctx.H, schedule)
        if collectives is None:
            return window, None
        return window, assign_runs(collectives, window, ctx.profile.units)

    @classmethod
    def simulation(cls, ctx):
        if not ctx.cfg.overlap_forward:
            return super().simulation(ctx)
        # Each average is waited for in its run's next forward pre-hook (the input-side end).
        plans = [IterPlan(deferred=[(b, c, b) for b, c in jobs]) for jobs in cls.sim_jobs(ctx)]
        return lambda t: plans[t % ctx.H]

    @classmethod
    def variant(cls, cfg) -> str:
        return "dreamddp+overlap" if cfg.get("overlap_forward") else cls.name

    def describe(self) -> dict:
        return {**super().describe(), "schedule_source": self.source}
