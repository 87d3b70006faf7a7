"""DreamDDP: partial parameter averaging on a profiled schedule.

The mechanism is PLSGD-ENP's (plsgd_enp.py); the assignment of units to iterations
comes from a schedule: a scheduler's output on a profile of the live job
(``algo.scheduler``: the paper's DFS plus bubble filling by default, so a unit
may sync more than once per window; ``general`` assignments with their own
collectives, schedule/make.py), or a file (``algo.schedule``).  ``prepare`` makes it during warm-up,
before the algorithm exists; the constructor takes it as its set-up
(``{"schedule": {"source", "H", "schedule", ...}}``, which the run record and
checkpoints keep).  With ``algo.overlap_forward`` the averages still in flight
at the step finish behind the next forward instead (dreamddp_overlap.py); with
``algo.merge_delay`` the collectives the link cannot finish in place are
merged late (the pipeline's copy averaged late: engine/pipeline.py; which
collectives go late: schedule/delay.py).  Codecs and outer steps compose (the
``dreamddp_*`` recipes): a unit takes its outer step at its first sync of the
window, and the bubble-filling syncs after it only average (engine/pipeline.py).

Numerics: as PLSGD-ENP: the average lands on the parameters before the local
update, which then applies the local gradient on top.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from dreamddp.algorithms.base import ALGORITHMS, AlgoConfig, Algorithm, Display
from dreamddp.checks import ConfigError, at_least, choice
from dreamddp.engine.stages import anchored
from dreamddp.schedule.cost import groups as schedule_groups
from dreamddp.schedule.delay import is_late, plan_delayed, window_plans
from dreamddp.schedule.make import make_plan
from dreamddp.schedule.schedule_file import (ScheduleError, assign_delayed, assign_runs, assign_units,
                                             read_schedule_file, runs_as_names)

SCHEDULERS = ("dreamddp", "optimal", "general")


@dataclass
class DreamDDPConfig(AlgoConfig):
    # Path to a schedule JSON ({"H": H, "schedule": {module: iteration(s)}}, the authors'
    # format, optionally with "collectives" and "delayed"); None = profile the live job at
    # start-up, then schedule.
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
    # pre-hook (same numerics as plain dreamddp; our extension, dreamddp_overlap.py).  The
    # contiguous schedulers then plan with each average due there; general keeps its search's
    # plan only where it waits no more than their optimum under those deadlines (schedule/make.py).
    overlap_forward: bool = False
    # 0: the paper's DreamDDP.  d >= 1: a collective the link cannot finish in place is
    # launched after the step on a copy of its parameters and merged at the end of
    # backward d iterations later, corrected for the local progress made meanwhile
    # (engine/pipeline.py); 1 <= d < H.
    merge_delay: int = 0
    # With merge_delay: the most parts a late collective the link cannot carry within its
    # room (d iterations of compute less the step) may be cut into, part k launched k
    # iterations after the collective's own (schedule/delay.py), at most H; 1 = never cut.
    late_parts: int = 4
    # Group consecutive units of one iteration into one collective where the link's cost per
    # collective (its measured alpha plus, on a paced link, an all-reduce's latency hops)
    # makes that shorten the modelled wait; false: the scheduler ignores that cost (one
    # collective per unit, the paper's plan). The contiguous schedulers only: general plans
    # its own collectives.
    fuse: bool = True


@ALGORITHMS.register
class DreamDDP(Algorithm):
    name = "dreamddp"
    Config = DreamDDPConfig
    display = Display(80, periodic=True, authors_key="dream_ddp")
    scheduled = True
    syncs = "param"
    fixed_timing = ("its schedule may sync a unit more than once per window, in place or by algo.merge_delay; "
                    "a window-late outer step needs one sync per unit and window (flsgd, plsgd_enp)")

    @classmethod
    def check(cls, cfg) -> None:
        super().check(cfg)
        choice("algo.scheduler", cfg.scheduler, SCHEDULERS)
        at_least("algo.merge_delay", cfg.merge_delay, 0)
        at_least("algo.late_parts", cfg.late_parts, 1)
        if anchored(cfg):
            for option in ("merge_delay", "overlap_forward"):  # their late merges move what the anchor tracks
                if getattr(cfg, option):
                    raise ConfigError(f"algo.{option}={getattr(cfg, option)}: not with a codec or an outer step "
                                      f"(algo.compress={cfg.compress}, algo.outer_optimizer={cfg.outer_optimizer})")
        if cfg.merge_delay >= cfg.H:
            raise ConfigError(f"algo.merge_delay={cfg.merge_delay}: must be below algo.H={cfg.H} (a unit's average "
                              "merges before the unit syncs again)")

    @classmethod
    def merges_late(cls, cfg) -> bool:
        # overlap_forward's averages are awaited in the next iteration's forward: started at the
        # first wait (deferred) they travel in full at that wait, started as the iteration ends
        # (step) behind the forward before it (results/bench_carrier/README.md)
        return cfg.merge_delay > 0 or bool(cfg.overlap_forward)

    @classmethod
    def check_model(cls, cfg, layout) -> None:
        """A schedule file must fit the model: read, H, every unit, every iteration."""
        if not cfg.schedule:
            return
        try:
            made = read_schedule_file(cfg.schedule)
            if made["H"] != cfg.H:
                raise ScheduleError(f"{cfg.schedule}: the schedule's H={made['H']} is not algo.H={cfg.H}")
            if cfg.merge_delay and made.get("delayed") is None:
                # without the list nothing would merge late, yet the run would be labelled a delay run
                raise ScheduleError(f"{cfg.schedule}: lists no \"delayed\" collectives, so "
                                    f"algo.merge_delay={cfg.merge_delay} would merge nothing late; give a schedule "
                                    f"made with the delay (a run's schedule.json, or dreamddp-schedule "
                                    f"--merge-delay {cfg.merge_delay}), or drop algo.schedule to plan at start-up")
            unit_names, module_names = layout()
            _window(made, cfg.merge_delay, unit_names, module_names, cfg.schedule)
        except ScheduleError as e:
            raise ConfigError(f"algo.schedule={e}") from None

    @classmethod
    def prepare(cls, cfg, warmup) -> dict:
        """The schedule: from ``algo.schedule``, or profiled and scheduled on the live job."""
        if cfg.schedule:
            return {"schedule": {"source": cfg.schedule, **read_schedule_file(cfg.schedule)}}
        setup = cls.setup_from_profile(cfg, warmup.planning_profile(warmup.profile()), warmup.link_alpha)
        warmup.save_schedule(setup["schedule"])
        return setup

    @classmethod
    def setup_from_profile(cls, cfg, profile, alpha: float = 0.0) -> dict:
        """The schedule ``algo.scheduler`` makes on ``profile`` (each unit's all-reduce seconds as
        the link would take them; ``alpha`` the cost of one collective), and which of its
        collectives merge late under ``algo.merge_delay``."""
        if cfg.schedule:
            return cls.prepare(cfg, None)
        H, names = cfg.H, profile.units
        schedule, collectives = make_plan(profile, H, cfg.scheduler, cfg.bubble_fill, alpha, cfg.overlap_forward,
                                          cfg.fuse)
        source = f"profiled ({cfg.scheduler}{', for overlap_forward' if cfg.overlap_forward else ''})"
        if not cfg.merge_delay:
            return {"schedule": {**cls.setup_from_schedule(H, schedule, collectives)["schedule"], "source": source}}
        window = schedule_groups(profile, H, schedule)
        runs = (assign_runs(collectives, window, names) if collectives is not None
                else [[(u, u) for u in g] for g in window])
        runs, late = plan_delayed(profile, H, runs, cfg.merge_delay, alpha, cfg.overlap_forward, cfg.late_parts)
        schedule = {u: [h for h, its in enumerate(runs) if any(a <= i <= b for a, b in its)] for i, u in enumerate(names)}
        fused = any(a != b for its in runs for a, b in its)
        made = cls.setup_from_schedule(H, schedule, runs_as_names(runs, names) if fused else None,
                                       runs_as_names(late, names))["schedule"]
        return {"schedule": {**made, "source": f"{source}, merge_delay={cfg.merge_delay}"}}

    @classmethod
    def setup_from_schedule(cls, H: int, schedule: dict, collectives=None, delayed=None) -> dict:
        made = {"source": "given", "H": H, "schedule": schedule}
        if collectives is not None:
            made["collectives"] = [[list(r) for r in its] for its in collectives]
        if delayed is not None:
            made["delayed"] = [[list(r) for r in its] for its in delayed]
        return {"schedule": made}

    def __init__(self, cfg, setup: dict | None = None):
        super().__init__(cfg, setup)
        if "schedule" not in self.setup:
            raise ScheduleError("algo=dreamddp: no schedule in its set-up (give algo.schedule or let warm-up profile)")
        self.made = self.setup["schedule"]
        if self.made["H"] != cfg.H:
            raise ScheduleError(f"algo.H={cfg.H} does not match the schedule's H={self.made['H']}")
        self.source = self.made.get("source", "schedule")

    def make_plan(self, layout) -> None:
        self.groups, self.runs, self.delayed = _window(self.made, self.cfg.merge_delay, list(layout.names),
                                                       layout.modules, self.source)
        self.H = len(self.groups)
        self._plans = window_plans(self.runs, self.delayed, self.cfg.merge_delay, self.cfg.overlap_forward)
        self.inplace = [sorted(u for op in plan if not is_late(op) for u in op.units) for plan in self._plans]

    def base_plan(self, t: int):
        return self._plans[t % self.H]

    @classmethod
    def variant(cls, cfg) -> str:
        name = cfg.get("recipe") or ("dreamddp+overlap" if cfg.get("overlap_forward") else cls.name)
        return f"{name}+delay{cfg['merge_delay']}" if cfg.get("merge_delay") else name

    def describe(self) -> dict:
        out = {**super().describe(), "H": self.H, "groups": [list(g) for g in self.groups], "schedule_source": self.source}
        if any(a != b for runs in self.runs for a, b in runs):
            out["runs"] = [[list(r) for r in runs] for runs in self.runs]
        if any(self.delayed):
            out.update(merge_delay=self.cfg.merge_delay, delayed=[[list(r) for r in its] for its in self.delayed])
        return out


def _window(made: dict, delay: int, unit_names: list[str], module_names, source: str):
    """(units, collectives, late collectives) per iteration of the window, as unit indices."""
    H = made["H"]
    groups = assign_units(made["schedule"], H, unit_names, module_names, source)
    if made.get("collectives") is not None:
        runs = assign_runs([[tuple(r) for r in its] for its in made["collectives"]], groups, unit_names, source)
    else:
        runs = [[(u, u) for u in g] for g in groups]
    late = [[] for _ in range(H)]
    if made.get("delayed") is not None:
        if not delay and any(made["delayed"]):
            raise ScheduleError(f"{source}: has delayed collectives but algo.merge_delay=0")
        late = assign_delayed([[tuple(r) for r in its] for its in made["delayed"]], runs, unit_names, delay, source)
    return groups, runs, late
