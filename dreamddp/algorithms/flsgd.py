"""FLSGD (full local SGD): H local steps, then all parameters averaged, blocking.

After the optimizer step of every iteration t with (t + 1) % H == 0 the whole
flat parameter buffer is all-reduced (AVG); nothing overlaps it.

Numerics: torch's PeriodicModelAverager(period=H, warmup_steps=H-1) called
after every step (equivalently PostLocalSGDOptimizer); with H = 1 and plain
SGD it equals S-SGD.  With ``algo.outer_optimizer=nesterov`` (outer.py) it is DiLoCo: the
whole model's outer gradient, outer Nesterov SGD on the anchor every H steps.

With ``algo.timing=late`` (engine/pipeline.py) the average (or outer step) of window k lands
at the end of window k+1, its all-reduce hidden under that window, the local progress made
meanwhile kept: the naive one-step-late update; ``eager`` is Kale et al.'s eager update (the
``diloco_eager`` recipe).
"""

from __future__ import annotations

from dreamddp.algorithms.base import ALGORITHMS, Algorithm, Display
from dreamddp.engine.plan import Payload, SyncOp, When


@ALGORITHMS.register
class FLSGD(Algorithm):
    name = "flsgd"
    display = Display(40, periodic=True, authors_key="localsgd")
    syncs = "param"

    def make_plan(self, layout) -> None:
        self._sync = (SyncOp(0, len(layout) - 1, Payload.PARAM, When.AFTER_STEP, When.AFTER_STEP),)

    def base_plan(self, t: int):
        return self._sync if (t + 1) % self.cfg.H == 0 else ()

    def describe(self) -> dict:
        return {**super().describe(), "H": self.cfg.H}
