"""The reference: torch.nn.parallel.DistributedDataParallel itself.

Not built on the engine: DDP buckets and all-reduces gradients inside
backward on its own.  It is here so every other algorithm can be compared
against code nobody here wrote.  Its communication cannot be paced by a link
that paces inside our communicator (DDP talks to the process group directly),
so it runs on the ideal link or under real shaping (tc).
"""

from __future__ import annotations

from dreamddp.algorithms.base import ALGORITHMS, Algorithm, Display
from dreamddp.lazy import lazy

torch = lazy("torch")


@ALGORITHMS.register
class DDP(Algorithm):
    name = "ddp"
    display = Display("torch DDP", 0)
    uses_engine = False

    @classmethod
    def wrap_model(cls, model, ctx):
        ids = [ctx.local_rank] if ctx.device.type == "cuda" else None
        return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)

    @classmethod
    def bytes_per_iteration(cls, units) -> int:
        return sum(u.nbytes for u in units)  # every gradient, every iteration
