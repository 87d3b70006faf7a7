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
``algo.outer_optimizer=nesterov`` sends each synced unit's outer gradient instead (outer.py).
"""

from __future__ import annotations

from dreamddp.algorithms.outer import OuterSync
from dreamddp.engine.plan import Payload, SyncOp, When


class PartialParamSync(OuterSync):
    def assignment(self, layout) -> list[list[int]]:
        """Unit indices (backward order) synchronised in each iteration of the window."""
        raise TypeError(f"{type(self).__name__} must define assignment()")

    def collectives(self, layout) -> list[list[tuple[int, int]]]:
        """Per iteration, its collectives as (first, last) runs of ``self.groups``; by
        default one per unit, each launched from its own gradient-ready hook."""
        return [[(u, u) for u in g] for g in self.groups]

    def bind_plan(self, layout) -> None:
        self._layout = layout
        self.groups = self.assignment(layout)
        self.runs = self.collectives(layout)
        self.H = len(self.groups)
        self._plans = [tuple(self.ops(runs, t)) for t, runs in enumerate(self.runs)]

    def ops(self, runs: list[tuple[int, int]], t: int) -> list[SyncOp]:
        """Iteration t's ops over its collectives' runs: averaged in place during backward."""
        return [self.outer_op(SyncOp(a, b, Payload.PARAM, When.UNIT_READY, When.END_OF_BACKWARD), self._layout)
                for a, b in runs]

    def plan(self, t: int):
        return self._plans[t % self.H]

    def describe(self) -> dict:
        out = {"name": self.name, "H": self.H, "groups": [list(g) for g in self.groups]}
        if any(a != b for runs in self.runs for a, b in runs):
            out["runs"] = [[list(r) for r in runs] for runs in self.runs]
        if self.outer:
            out.update(self.outer_describe())
        return out
