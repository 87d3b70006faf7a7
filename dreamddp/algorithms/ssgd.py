"""S-SGD: every gradient all-reduced (averaged) after backward, blocking.

Numerics: identical to torch DistributedDataParallel (gradients averaged over
workers before every optimizer step); replicas stay bitwise identical.  With a
codec (``algo.compress``) the pipeline all-gathers every rank's compressed
gradient and the step uses their mean (engine/pipeline.py): DeMo's recipe is this.
"""

from __future__ import annotations

from dreamddp.algorithms.base import ALGORITHMS, Algorithm, Display
from dreamddp.engine.plan import Payload, SyncOp, When


@ALGORITHMS.register
class SSGD(Algorithm):
    name = "ssgd"
    display = Display(10, authors_key="sgd")
    syncs = "grad"

    def make_plan(self, layout) -> None:
        self._plan = (SyncOp(0, len(layout) - 1, Payload.GRAD, When.END_OF_BACKWARD, When.END_OF_BACKWARD),)

    def base_plan(self, t: int):
        return self._plan
