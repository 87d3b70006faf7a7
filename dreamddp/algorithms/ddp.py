"""The reference: torch.nn.parallel.DistributedDataParallel itself.

Not built on the engine: DDP buckets and all-reduces gradients inside
backward on its own.  It is here so every other algorithm can be compared
against code nobody here wrote.  Its communication cannot be paced by a link
that paces inside our communicator (DDP talks to the process group directly),
so it runs on the ideal link or under real shaping (tc), and the simulator
does not time it (its traffic is in no plan).
"""

from __future__ import annotations

from dreamddp.algorithms.base import ALGORITHMS, Algorithm, Display
from dreamddp.lazy import lazy

torch = lazy("torch")
passthrough = lazy("dreamddp.engine.passthrough")


@ALGORITHMS.register
class DDP(Algorithm):
    name = "ddp"
    display = Display(0)
    syncs_itself = True

    @classmethod
    def make_engine(cls, model, units, comm, ctx, *, sample_every: int, grad_clip: float = 0.0):
        """DDP around the model (its constructor broadcasts rank 0's parameters), driven
        through the engine's lifecycle calls; every gradient, every iteration, for the record."""
        ids = [ctx.device.index] if ctx.device.type == "cuda" else None  # workers may share a GPU
        ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)
        return passthrough.PassthroughEngine(ddp, units, sum(u.nbytes for u in units), grad_clip), ddp
