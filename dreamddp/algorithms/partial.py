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
from dreamddp.engine.plan import Payload, When, per_unit_ops
from dreamddp.schedule.cost import groups as schedule_groups
from dreamddp.schedule.simulator import IterPlan


class PartialParamSync(Algorithm):
    def assignment(self, engine) -> list[list[int]]:
        """Unit indices (backward order) synchronised in each iteration of the window."""
        raise TypeError(f"{type(self).__name__} must define assignment()")

    def bind(self, engine) -> None:
        self.groups = self.assignment(engine)
        self.H = len(self.groups)
        self._plans = [per_unit_ops(g, Payload.PARAM, When.UNIT_READY, When.END_OF_BACKWARD) for g in self.groups]

    def plan(self, t: int):
        return self._plans[t % self.H]

    def describe(self) -> dict:
        return {"name": self.name, "H": self.H, "groups": [list(g) for g in self.groups]}

    @classmethod
    def sim_groups(cls, ctx) -> list[list[int]]:
        """Units synced per iteration when the context gives no schedule of its own."""
        raise TypeError(f"{cls.__name__} must define sim_groups()")

    @classmethod
    def simulation(cls, ctx):
        window = schedule_groups(ctx.profile, ctx.H, ctx.schedule) if ctx.schedule is not None else cls.sim_groups(ctx)
        plans = [IterPlan(overlapped=ctx.per_unit(g)) for g in window]
        return lambda t: plans[t % ctx.H]
