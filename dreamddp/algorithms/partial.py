"""Partial local SGD: some units have their PARAMETERS averaged in each iteration.

The mechanism plsgd_enp and dreamddp share; they differ only in how units are
assigned to iterations (``assignment``).  In iteration t each unit assigned to
t mod H launches an in-place all-reduce (AVG) of its parameters from its
gradient-ready hook, while backward of the input-side units goes on; all
complete by the end of backward; then the optimizer applies the LOCAL gradient
on top of the averaged parameters (DreamDDP's deliberate ordering, as the paper's
implementation does).

Numerics relative to S-SGD: replicas are equal only right after a unit's
average and differ by one local step afterwards; every unit is averaged at
least once per H iterations (the same traffic as full local SGD).
"""

from __future__ import annotations

from dreamddp.algorithms.base import Algorithm
from dreamddp.engine.plan import Payload, SyncOp, When
from dreamddp.schedule.cost import groups as schedule_groups
from dreamddp.schedule.simulator import IterPlan


class PartialParamSync(Algorithm):
    def assignment(self, engine) -> list[list[int]]:
        """Unit indices (backward order) synchronised in each iteration of the window."""
        raise TypeError(f"{type(self).__name__} must define assignment()")

    def collectives(self, engine) -> list[list[tuple[int, int]]]:
        """Per iteration, its collectives as (first, last) runs of ``self.groups``; by
        default one per unit, each launched from its own gradient-ready hook."""
        return [[(u, u) for u in g] for g in self.groups]

    def bind(self, engine) -> None:
        self.groups = self.assignment(engine)
        self.runs = self.collectives(engine)
        self.H = len(self.groups)
        self._plans = [tuple(SyncOp(a, b, Payload.PARAM, When.UNIT_READY, When.END_OF_BACKWARD) for a, b in runs)
                       for runs in self.runs]

    def plan(self, t: int):
        return self._plans[t % self.H]

    def describe(self) -> dict:
        out = {"name": self.name, "H": self.H, "groups": [list(g) for g in self.groups]}
        if any(a != b for runs in self.runs for a, b in runs):
            out["runs"] = [[list(r) for r in runs] for runs in self.runs]
        return out

    @classmethod
    def sim_window(cls, ctx) -> tuple[list[list[int]], list[list[tuple[int, int]]] | None]:
        """(units, collectives or None for one per unit) per iteration when the context
        gives no schedule of its own."""
        raise TypeError(f"{cls.__name__} must define sim_window()")

    @classmethod
    def sim_jobs(cls, ctx) -> list[list[tuple[int, float]]]:
        """Per iteration, (unit whose gradient launches it, seconds) of each collective."""
        if ctx.schedule is not None:
            window, runs = schedule_groups(ctx.profile, ctx.H, ctx.schedule), ctx.runs
        else:
            window, runs = cls.sim_window(ctx)
        if runs is None:
            return [ctx.per_unit(g) for g in window]
        return [ctx.per_run(r) for r in runs]

    @classmethod
    def simulation(cls, ctx):
        plans = [IterPlan(overlapped=jobs) for jobs in cls.sim_jobs(ctx)]
        return lambda t: plans[t % ctx.H]
