"""The reference: torch.nn.parallel.DistributedDataParallel itself.

Not built on the engine: DDP buckets and all-reduces gradients inside
backward on its own.  It is here so every other algorithm can be compared
against code nobody here wrote.  Its communication cannot be paced by a link
that paces inside our communicator (DDP talks to the process group directly),
so it runs on the ideal link or under real shaping (tc), and the simulator
does not time it (its traffic is in no plan).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from dreamddp.algorithms.base import ALGORITHMS, AlgoConfig, Algorithm, Display
from dreamddp.checks import positive
from dreamddp.lazy import lazy

torch = lazy("torch")
passthrough = lazy("dreamddp.engine.passthrough")


@dataclass
class DDPConfig(AlgoConfig):
    # DDP's own bucket_cap_mb (MiB). null: torch's default, 25 MiB buckets after a first one of
    # 1 MiB. A size at least the model's gives one bucket, all-reduced once backward has made every
    # gradient: S-SGD's definition run by DDP, so S-SGD's like for like (dreamddp/bench/segments.py).
    bucket_cap_mb: Optional[float] = None


@ALGORITHMS.register
class DDP(Algorithm):
    name = "ddp"
    on_shards = "torch DDP replicates whole parameters; with shards use ssgd (= torch's HSDP)"
    Config = DDPConfig
    display = Display(0)
    syncs_itself = True
    on_engine = False
    syncs = "own"  # DDP's buckets, outside the engine

    @classmethod
    def check(cls, cfg) -> None:
        super().check(cfg)
        positive("algo.bucket_cap_mb", cfg.bucket_cap_mb, optional=True)

    @classmethod
    def make_engine(cls, model, units, comm, ctx, *, cfg, sample_every: int, grad_clip: float = 0.0):
        """DDP around the model (its constructor broadcasts rank 0's parameters), driven
        through the engine's lifecycle calls; every gradient, every iteration, for the record."""
        ids = [ctx.device.index] if ctx.device.type == "cuda" else None  # workers may share a GPU
        cap = {} if cfg.bucket_cap_mb is None else {"bucket_cap_mb": cfg.bucket_cap_mb}
        ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids, **cap)
        return passthrough.PassthroughEngine(ddp, units, sum(u.nbytes for u in units), grad_clip), ddp
