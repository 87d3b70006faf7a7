"""ASC-WFBP: wait-free backpropagation with merged gradient buckets.

Consecutive units in backward order are merged into buckets that close once
they hold at least ``algo.bucket_mb`` megabytes, as DDP assigns its buckets; each bucket's all-reduce launches the moment its last gradient is
ready and overlaps the rest of backward; all finish before the optimizer step.

Numerics: S-SGD (the same averaged gradient), up to floating-point summation
order inside the collective.
"""

from __future__ import annotations

from dreamddp.algorithms.base import Algorithm
from dreamddp.engine.plan import Payload, SyncOp, When


def buckets(sizes: list[int], cap: int) -> list[tuple[int, int]]:
    """Contiguous buckets over ``sizes`` (bytes, backward order), each closed once it reaches ``cap``."""
    out: list[tuple[int, int]] = []
    first, acc = 0, 0
    for i, s in enumerate(sizes):
        acc += s
        if acc >= cap:
            out.append((first, i))
            first, acc = i + 1, 0
    if first < len(sizes):
        out.append((first, len(sizes) - 1))
    return out


class ASCWFBP(Algorithm):
    name = "ascwfbp"

    def bind(self, engine) -> None:
        cap = int(self.cfg.bucket_mb * 2**20)
        if cap <= 0:
            raise ValueError(f"algo.bucket_mb={self.cfg.bucket_mb}: must be > 0")
        self.buckets = buckets([u.nbytes for u in engine.units], cap)
        self._plan = tuple(SyncOp(a, b, Payload.GRAD, When.UNIT_READY, When.END_OF_BACKWARD) for a, b in self.buckets)

    def plan(self, t: int):
        return self._plan

    def describe(self) -> dict:
        return {"name": self.name, "buckets": len(self.buckets), "bucket_mb": self.cfg.bucket_mb}
