"""ASC-WFBP: wait-free backpropagation with merged gradient buckets.

Consecutive units in backward order are merged into buckets that close once
they hold at least ``algo.bucket_mb`` megabytes, as DDP assigns its buckets
(schedule.partition.buckets); each bucket's all-reduce launches the moment its
last gradient is ready and overlaps the rest of backward; all finish before
the optimizer step.

Numerics: S-SGD (the same averaged gradient), up to floating-point summation
order inside the collective.
"""

from __future__ import annotations

from dataclasses import dataclass

from dreamddp.algorithms.base import ALGORITHMS, AlgoConfig, Algorithm, Display
from dreamddp.checks import positive
from dreamddp.engine.plan import Payload, SyncOp, When
from dreamddp.schedule.partition import buckets


@dataclass
class ASCWFBPConfig(AlgoConfig):
    # Gradient bucket size in MB: consecutive units merge until a bucket holds this much
    # (a tiny value gives one bucket per unit).
    bucket_mb: float = 25.0


def bucket_bytes(cfg) -> int:
    return max(1, int(cfg.bucket_mb * 2**20))


@ALGORITHMS.register
class ASCWFBP(Algorithm):
    name = "ascwfbp"
    Config = ASCWFBPConfig
    display = Display(20, authors_key="pipe_sgd")
    syncs = "grad"

    @classmethod
    def check(cls, cfg) -> None:
        super().check(cfg)
        positive("algo.bucket_mb", cfg.bucket_mb)

    def make_plan(self, layout) -> None:
        self.buckets = buckets(list(layout.nbytes), bucket_bytes(self.cfg))
        self._plan = tuple(SyncOp(a, b, Payload.GRAD, When.UNIT_READY, When.END_OF_BACKWARD) for a, b in self.buckets)

    def base_plan(self, t: int):
        return self._plan

    def describe(self) -> dict:
        return {**super().describe(), "buckets": len(self.buckets), "bucket_mb": self.cfg.bucket_mb}
