"""S-SGD: every gradient all-reduced (averaged) after backward, blocking.

Numerics: identical to torch DistributedDataParallel (gradients averaged over
workers before every optimizer step); replicas stay bitwise identical.
"""

from __future__ import annotations

from dreamddp.algorithms.base import ALGORITHMS, Algorithm, Display
from dreamddp.engine.plan import Payload, SyncOp, When
from dreamddp.schedule.simulator import IterPlan


@ALGORITHMS.register
class SSGD(Algorithm):
    name = "ssgd"
    display = Display("S-SGD", 10, authors_key="sgd")

    def bind(self, engine) -> None:
        self._plan = (SyncOp(0, len(engine.units) - 1, Payload.GRAD, When.END_OF_BACKWARD, When.END_OF_BACKWARD),)

    def plan(self, t: int):
        return self._plan

    @classmethod
    def simulation(cls, ctx):
        everything = IterPlan(after_backward=ctx.collective(range(ctx.n_units)))
        return lambda t: everything
