"""DreamDDP: partial parameter averaging on a profiled schedule.

The mechanism is PLSGD's (see partial.py); the assignment of units to
iterations comes from a schedule (the DreamDDP scheduler's output, possibly
with bubble filling, so a unit may sync more than once per window).  The
trainer either reads ``algo.schedule`` or profiles the run and schedules it
before training, then hands the schedule over with :meth:`set_schedule`.

Numerics: as PLSGD (partial.py): the average lands on the parameters before
the local update, which then applies the local gradient on top.
"""

from __future__ import annotations

from dreamddp.algorithms.partial import PartialParamSync
from dreamddp.algorithms.schedule_file import ScheduleError, assign_units
from dreamddp.engine.units import leaf_module_names


class DreamDDP(PartialParamSync):
    name = "dreamddp"

    def __init__(self, cfg):
        super().__init__(cfg)
        self.schedule: dict[str, list[int]] | None = None
        self.source = "schedule"

    def set_schedule(self, H: int, schedule: dict[str, list[int]], source: str = "schedule") -> None:
        if H != self.cfg.H:
            raise ScheduleError(f"algo.H={self.cfg.H} does not match the schedule's H={H} ({source})")
        self.schedule, self.source = schedule, source

    def assignment(self, engine) -> list[list[int]]:
        if self.schedule is None:
            raise ScheduleError("algo=dreamddp: no schedule set (give algo.schedule or let the trainer profile)")
        names = [u.name for u in engine.units]
        modules = {n for n, _ in engine.model.named_modules()} | set(leaf_module_names(engine.model))
        return assign_units(self.schedule, self.cfg.H, names, modules, self.source)

    def describe(self) -> dict:
        return {**super().describe(), "schedule_source": self.source}
