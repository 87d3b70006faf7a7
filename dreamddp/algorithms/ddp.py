"""The reference: torch.nn.parallel.DistributedDataParallel itself.

Not built on the engine: DDP buckets and all-reduces gradients inside
backward on its own.  It is here so every other algorithm can be compared
against code nobody here wrote.  Its communication is not paced by the
emulated link (DDP talks to the process group directly); use it as the
numerical reference, not for link studies.
"""

from __future__ import annotations

from dreamddp.algorithms.base import Algorithm


class DDP(Algorithm):
    name = "ddp"
    uses_engine = False

    def plan(self, t: int):
        return ()
