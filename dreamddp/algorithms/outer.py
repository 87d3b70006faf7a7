"""DiLoCo's outer optimizer for any algorithm that averages parameters (FLSGD, PLSGD-ENP,
DreamDDP): ``algo.outer_optimizer=avg|nesterov``.

``avg`` (the default) is the algorithm as it is: a unit's parameters averaged in place.
``nesterov`` keeps an anchor per unit (the parameters its last sync agreed on, fp32) and an
outer momentum.  Where the algorithm's plan syncs units a..b, it sends their outer gradient
instead and applies outer Nesterov SGD to the anchor (Douillard et al., DiLoCo)::

    Delta  = mean over workers of (anchor - theta)          the outer gradient, one all-reduce
    m      <- mu * m + Delta
    anchor <- anchor - outer_lr * (Delta + mu * m)          torch.optim.SGD(nesterov=True) on Delta
    theta  <- anchor

at the point the plan completes the sync (DreamDDP and PLSGD-ENP: the end of backward, so the
local step then applies on top; FLSGD: after the step).  With ``outer_lr=1`` and ``mu=0`` the
anchor becomes the average of the replicas, as ``avg`` has it (to float rounding).  FLSGD with
``nesterov`` is DiLoCo; DreamDDP with it is our layer-wise DiLoCo: each unit's outer step at
the iteration its schedule syncs it.  Memory beyond the algorithm: the anchor (one fp32 copy of
the model) and the outer momentum (another, when mu > 0); both are saved in checkpoints.
Bytes on the wire: the same fp32 all-reduce of the units.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dreamddp.algorithms.base import AlgoConfig, Algorithm, op_tag
from dreamddp.checks import ConfigError, between, choice, positive
from dreamddp.engine.plan import Payload, SyncOp
from dreamddp.lazy import lazy

torch = lazy("torch")

OUTER_OPTIMIZERS = ("avg", "nesterov")


@dataclass
class OuterConfig(AlgoConfig):
    # avg: the replicas' parameters averaged in place (the paper's algorithms) | nesterov:
    # DiLoCo's outer Nesterov SGD on each synced unit's outer gradient (outer.py).
    outer_optimizer: str = "avg"
    # Outer learning rate and Nesterov momentum (nesterov only; DiLoCo's 0.7 and 0.9).
    outer_lr: float = 0.7
    outer_momentum: float = 0.9


class OuterSync(Algorithm):
    """The outer optimizer for an algorithm whose plan averages PARAM payloads in place."""

    Config = OuterConfig

    @classmethod
    def check(cls, cfg) -> None:
        super().check(cfg)
        choice("algo.outer_optimizer", cfg.outer_optimizer, OUTER_OPTIMIZERS)
        positive("algo.outer_lr", cfg.outer_lr)
        between("algo.outer_momentum", cfg.outer_momentum, 0, 1, open_high=True)
        if cfg.outer_optimizer != "avg":
            for option in ("merge_delay", "overlap_forward"):  # their late merges move what the anchor tracks
                if getattr(cfg, option, None):
                    raise ConfigError(f"algo.{option}={getattr(cfg, option)}: not with "
                                      f"algo.outer_optimizer={cfg.outer_optimizer} (use avg)")

    @property
    def outer(self) -> bool:
        return self.cfg.outer_optimizer != "avg"

    def outer_op(self, op: SyncOp) -> SyncOp:
        """``op`` as the plan states it under this outer optimizer: its parameters averaged in
        place (avg), or the outer gradient of its units, derived at launch (nesterov)."""
        return replace(op, payload=Payload.OUTER) if self.outer and op.payload is Payload.PARAM else op

    def bind(self, engine) -> None:
        super().bind(engine)
        if self.outer:
            params = engine.flat.params
            self.anchor = params.detach().float().clone()
            self.momentum = torch.zeros_like(self.anchor) if self.cfg.outer_momentum > 0 else None
            self._sent: dict = {}  # op in flight -> (start, end, its outer gradient buffer)

    def launch(self, engine, op: SyncOp):
        if op.payload is not Payload.OUTER:
            return super().launch(engine, op)
        a, b = engine.flat.span(op.first, op.last)
        delta = self.anchor[a:b] - engine.flat.params[a:b].float()
        self._sent[op] = (a, b, delta)
        return engine.comm.all_reduce_avg(delta, tag=op_tag(engine, op))

    def on_complete(self, engine, op: SyncOp) -> None:
        if op.payload is not Payload.OUTER:
            return super().on_complete(engine, op)
        a, b, mean = self._sent.pop(op)
        mu, anchor = self.cfg.outer_momentum, self.anchor[a:b]
        with torch.no_grad():
            step = mean
            if self.momentum is not None:
                m = self.momentum[a:b]
                m.mul_(mu).add_(mean)
                step = mean.add(m, alpha=mu)  # Nesterov
            anchor.sub_(step, alpha=self.cfg.outer_lr)
            engine.flat.params[a:b].copy_(anchor)

    def state_dict(self) -> dict:
        state = super().state_dict()
        if self.outer:  # after the engine's flush nothing is in flight (every sync completes in its iteration)
            state["outer"] = {"anchor": self.anchor, "momentum": self.momentum}
        return state

    def load_state_dict(self, state: dict) -> None:
        state = dict(state)
        outer = state.pop("outer", None)
        if (outer is None) == self.outer:
            raise ValueError(f"{self.name}: checkpoint and algo.outer_optimizer={self.cfg.outer_optimizer} disagree "
                             "on the outer optimizer's state")
        if outer is not None:
            self.check_saved_size("anchor", outer["anchor"].numel(), self.anchor.numel())
            self.anchor.copy_(outer["anchor"])
            if (outer["momentum"] is None) != (self.momentum is None):
                raise ValueError(f"{self.name}: checkpoint and algo.outer_momentum disagree on outer momentum state")
            if self.momentum is not None:
                self.momentum.copy_(outer["momentum"])
        super().load_state_dict(state)

    def outer_memory_bytes(self) -> dict:
        if not self.outer:
            return {}
        return {"anchor": 4 * self.anchor.numel(), "outer_momentum": 0 if self.momentum is None else 4 * self.momentum.numel()}
