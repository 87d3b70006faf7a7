"""S-SGD: every gradient all-reduced (averaged) after backward, blocking.

Numerics: identical to torch DistributedDataParallel (gradients averaged over
workers before every optimizer step); replicas stay bitwise identical.  ``algo.compress``
sends the gradient compressed (grad_compress.py).
"""

from __future__ import annotations

from dreamddp.algorithms.base import ALGORITHMS, Display
from dreamddp.algorithms.grad_compress import GradCompress
from dreamddp.engine.plan import Payload, SyncOp, When


@ALGORITHMS.register
class SSGD(GradCompress):
    name = "ssgd"
    display = Display(10, authors_key="sgd")

    def bind_plan(self, layout) -> None:
        self._plan = (self.compressed(SyncOp(0, len(layout) - 1, Payload.GRAD, When.END_OF_BACKWARD,
                                             When.END_OF_BACKWARD), layout),)

    def plan(self, t: int):
        return self._plan

    def describe(self) -> dict:
        return {"name": self.name, **self.compress_describe()}
