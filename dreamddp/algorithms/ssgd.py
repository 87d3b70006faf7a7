"""S-SGD: every gradient all-reduced (averaged) after backward, blocking.

Numerics: identical to torch DistributedDataParallel (gradients averaged over
workers before every optimizer step); replicas stay bitwise identical.
"""

from __future__ import annotations

from dreamddp.algorithms.base import Algorithm
from dreamddp.engine.plan import Payload, SyncOp, When


class SSGD(Algorithm):
    name = "ssgd"

    def bind(self, engine) -> None:
        self._plan = (SyncOp(0, len(engine.units) - 1, Payload.GRAD, When.END_OF_BACKWARD, When.END_OF_BACKWARD),)

    def plan(self, t: int):
        return self._plan
