"""Partial local SGD: one group of units has its PARAMETERS averaged per iteration.

Shared by plsgd_enp and dreamddp, which differ only in how units are assigned
to iterations.  In iteration t each unit assigned to t mod H launches an
in-place all-reduce (AVG) of its parameters from its gradient-ready hook, while
backward of the input-side units goes on; all complete by the end of backward;
then the optimizer applies the LOCAL gradient on top of the averaged
parameters (DreamDDP's deliberate ordering, DESIGN.md).

Numerics relative to S-SGD: replicas are equal only right after a unit's
average and differ by one local step afterwards; every unit is averaged at
least once per H iterations (the same traffic as full local SGD).
"""

from __future__ import annotations

from dreamddp.algorithms.base import Algorithm
from dreamddp.engine.plan import Payload, When, per_unit_ops


class PartialParamSync(Algorithm):
    def assignment(self, engine) -> list[list[int]]:
        """Unit indices (backward order) synchronised in each iteration of the window."""
        raise NotImplementedError(f"{type(self).__name__} must define assignment()")

    def bind(self, engine) -> None:
        self.groups = self.assignment(engine)
        self.H = len(self.groups)
        self._plans = [per_unit_ops(g, Payload.PARAM, When.UNIT_READY, When.END_OF_BACKWARD) for g in self.groups]

    def plan(self, t: int):
        return self._plans[t % self.H]

    def describe(self) -> dict:
        return {"name": self.name, "H": self.H, "groups": [list(g) for g in self.groups]}


def equal_count_groups(n_units: int, H: int) -> list[list[int]]:
    """Units 0..n-1 (backward order) cut into H contiguous groups of equal count.

    When H does not divide n the first n % H groups (output side) take one unit more.
    """
    if not 1 <= H <= n_units:
        raise ValueError(f"algo.H={H}: must be between 1 and the model's {n_units} units")
    base, extra = divmod(n_units, H)
    groups, start = [], 0
    for g in range(H):
        size = base + (1 if g < extra else 0)
        groups.append(list(range(start, start + size)))
        start += size
    return groups


class PLSGDENP(PartialParamSync):
    """PLSGD-ENP: the equal-number partition baseline (group g syncs when t mod H == g)."""

    name = "plsgd_enp"

    def assignment(self, engine) -> list[list[int]]:
        return equal_count_groups(len(engine.units), self.cfg.H)
