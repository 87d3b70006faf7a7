"""FLSGD (full local SGD): H local steps, then all parameters averaged, blocking.

After the optimizer step of every iteration t with (t + 1) % H == 0 the whole
flat parameter buffer is all-reduced (AVG); nothing overlaps it.

Numerics: torch's PeriodicModelAverager(period=H, warmup_steps=H-1) called
after every step (equivalently PostLocalSGDOptimizer); with H = 1 and plain
SGD it equals S-SGD.
"""

from __future__ import annotations

from dreamddp.algorithms.base import ALGORITHMS, Algorithm, Display
from dreamddp.engine.plan import Payload, SyncOp, When
from dreamddp.schedule.simulator import IterPlan


@ALGORITHMS.register
class FLSGD(Algorithm):
    name = "flsgd"
    display = Display("FLSGD", 40, periodic=True, authors_key="localsgd")

    def bind(self, engine) -> None:
        self._sync = (SyncOp(0, len(engine.units) - 1, Payload.PARAM, When.AFTER_STEP, When.AFTER_STEP),)

    def plan(self, t: int):
        return self._sync if (t + 1) % self.cfg.H == 0 else ()

    @classmethod
    def simulation(cls, ctx):
        local, average = IterPlan(), IterPlan(after_step=ctx.collective(range(ctx.n_units)))
        return lambda t: average if (t + 1) % ctx.H == 0 else local

    def describe(self) -> dict:
        return {"name": self.name, "H": self.cfg.H}
