"""FLSGD (full local SGD): H local steps, then all parameters averaged, blocking.

After the optimizer step of every iteration t with (t + 1) % H == 0 the whole
flat parameter buffer is all-reduced (AVG); nothing overlaps it.

Numerics: torch's PeriodicModelAverager(period=H, warmup_steps=H-1) called
after every step (equivalently PostLocalSGDOptimizer); with H = 1 and plain
SGD it equals S-SGD.  With ``algo.outer_optimizer=nesterov`` (outer.py) it is DiLoCo: the
whole model's outer gradient, outer Nesterov SGD on the anchor every H steps.

``algo.outer_delay=1``, the one-step-late outer update (as overlapped DiLoCo, Kale et al.
2025, arXiv 2502.12996, without its eager local term).  With A the anchor (A = theta at
start), s_k the parameters window k+1 starts from and theta_k those at the end of window k:

    Delta_k = mean over workers of (s_{k-1} - theta_k)     launched after window k's last step
    at the end of window k >= 1, when Delta_{k-1} has landed:
        A       <- OuterStep(A, Delta_{k-1})               (avg: A - Delta; nesterov: outer.py)
        theta_k <- A + (theta_k - s_{k-1})                 the local progress made meanwhile kept
    s_k = theta_k                                          (s_{-1} = theta at start)

Each all-reduce has a whole window of local steps to hide under; the outer step lands one
window late.
"""

from __future__ import annotations

from dreamddp.algorithms.base import ALGORITHMS, Display
from dreamddp.algorithms.outer import OuterSync
from dreamddp.engine.plan import Payload, SyncOp, When


@ALGORITHMS.register
class FLSGD(OuterSync):
    name = "flsgd"
    display = Display(40, periodic=True, authors_key="localsgd")
    delays_outer = True

    def bind_plan(self, layout) -> None:
        self._sync = (self.outer_op(SyncOp(0, len(layout) - 1, Payload.PARAM, When.AFTER_STEP, When.AFTER_STEP), layout),)

    def plan(self, t: int):
        return self._sync if (t + 1) % self.cfg.H == 0 else ()

    def describe(self) -> dict:
        out = {"name": self.name, "H": self.cfg.H}
        if self.outer:
            out.update(self.outer_describe())
        return out
