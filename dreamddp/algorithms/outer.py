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

``algo.compress=topk|quant`` sends that outer gradient compressed (compress.py), with
``outer_optimizer=avg`` too: then ``anchor <- anchor - mean(C(anchor - theta))``, theta <-
anchor, the average of what was sent.  The parameters are never compressed: their change
since the anchor is, which is why any compression needs the anchor copy (DreamDDP's in-place
average needs none).  With error feedback the residuals (another fp32 copy) are kept too.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dreamddp.algorithms.base import Algorithm, Landed, op_tag
from dreamddp.algorithms.compress import CompressConfig, check_compress, compressed_mean, make_codec
from dreamddp.checks import ConfigError, between, choice, positive
from dreamddp.engine.plan import Payload, SyncOp
from dreamddp.lazy import lazy

torch = lazy("torch")

OUTER_OPTIMIZERS = ("avg", "nesterov")


@dataclass
class OuterConfig(CompressConfig):
    # avg: the replicas' parameters averaged in place (the paper's algorithms) | nesterov:
    # DiLoCo's outer Nesterov SGD on each synced unit's outer gradient (outer.py).  With
    # algo.compress, what travels is each synced unit's change since its last sync (anchor -
    # theta), never the parameters: the mean change is applied to the anchor.
    outer_optimizer: str = "avg"
    # Outer learning rate and Nesterov momentum (nesterov only; DiLoCo's 0.7 and 0.9).
    outer_lr: float = 0.7
    outer_momentum: float = 0.9
    # FLSGD only. 1: the outer update of window k applies at the end of window k+1, its
    # all-reduce hidden under that window's local steps, the local progress made meanwhile
    # kept (the one-step-late outer update; outer.py). 0: at once, blocking.
    outer_delay: int = 0


class OuterSync(Algorithm):
    """The outer optimizer for an algorithm whose plan averages PARAM payloads in place."""

    Config = OuterConfig
    delays_outer: bool = False  # True: the plan has one op per window, so an outer step can land a window late

    @classmethod
    def check(cls, cfg) -> None:
        super().check(cfg)
        choice("algo.outer_optimizer", cfg.outer_optimizer, OUTER_OPTIMIZERS)
        positive("algo.outer_lr", cfg.outer_lr)
        between("algo.outer_momentum", cfg.outer_momentum, 0, 1, open_high=True)
        check_compress(cfg)
        between("algo.outer_delay", cfg.outer_delay, 0, 1)
        if cfg.outer_delay and not cls.delays_outer:
            raise ConfigError(f"algo.outer_delay={cfg.outer_delay}: algo={cls.name} syncs within the window "
                              "(flsgd only)")
        if cfg.outer_optimizer != "avg" or cfg.compress != "none":
            for option in ("merge_delay", "overlap_forward"):  # their late merges move what the anchor tracks
                if getattr(cfg, option, None):
                    raise ConfigError(f"algo.{option}={getattr(cfg, option)}: not with algo.outer_optimizer="
                                      f"{cfg.outer_optimizer} and algo.compress={cfg.compress} (use avg and none)")

    @property
    def outer(self) -> bool:
        """The units' change since their last sync travels, not their parameters."""
        return self.cfg.outer_optimizer != "avg" or self.cfg.compress != "none" or bool(self.cfg.outer_delay)

    def outer_op(self, op: SyncOp, layout) -> SyncOp:
        """``op`` as the plan states it: its parameters averaged in place (avg, uncompressed),
        or its units' outer gradient derived at launch, all-reduced in fp32 or, compressed,
        every rank's payload all-gathered (``scale``: those bytes over the units' fp32 bytes)."""
        if not self.outer or op.payload is not Payload.PARAM:
            return op
        late = {"lag": self.cfg.H} if self.cfg.outer_delay else {}  # lands at the end of the next window
        codec = make_codec(self.cfg)
        if codec is None:
            return replace(op, payload=Payload.OUTER, **late)
        numel = layout.op_bytes(op) // 4
        return replace(op, payload=Payload.OUTER, collective="all_gather",
                       scale=layout.world * codec.nbytes(numel) / (4 * numel), **late)

    def bind(self, engine) -> None:
        super().bind(engine)
        if self.outer:
            params = engine.flat.params
            self.anchor = params.detach().float().clone()
            nesterov = self.cfg.outer_optimizer == "nesterov"
            self.momentum = torch.zeros_like(self.anchor) if nesterov and self.cfg.outer_momentum > 0 else None
            self.codec = make_codec(self.cfg)
            keep = self.codec is not None and self.cfg.error_feedback
            self.residual = torch.zeros_like(self.anchor) if keep else None
            # outer_delay: the parameters as the last outer step left them (where the local
            # progress of the window in flight is measured from)
            self.snapshot = self.anchor.clone() if self.cfg.outer_delay else None
            self._sent: dict = {}  # (op, launch iteration) in flight -> (start, end, its mean once landed)

    def launch(self, engine, op: SyncOp):
        if op.payload is not Payload.OUTER:
            return super().launch(engine, op)
        a, b = engine.flat.span(op.first, op.last)
        params = engine.flat.params[a:b].float()
        if self.snapshot is None:
            delta = self.anchor[a:b] - params
        else:  # the window's local progress from where the last outer step left the parameters
            delta = self.snapshot[a:b] - params
            if not self._sent:  # the first window: nothing lands here, the next one starts from theta
                self.snapshot[a:b] = params
        key = (op, engine.t)
        if self.codec is None:
            self._sent[key] = (a, b, lambda: delta)
            return engine.comm.all_reduce_avg(delta, tag=op_tag(engine, op))
        residual = None if self.residual is None else self.residual[a:b]
        handle, finish = compressed_mean(engine.comm, delta, self.codec, residual, tag=op_tag(engine, op))
        self._sent[key] = (a, b, finish)
        return handle

    def on_complete(self, engine, op: SyncOp) -> None:
        if op.payload is not Payload.OUTER:
            return super().on_complete(engine, op)
        a, b, finish = self._sent.pop((op, engine.t - op.lag))
        mean, anchor = finish(), self.anchor[a:b]
        mu = self.cfg.outer_momentum
        lr = self.cfg.outer_lr if self.cfg.outer_optimizer == "nesterov" else 1.0  # avg: the mean change itself
        with torch.no_grad():
            step = mean
            if self.momentum is not None:
                m = self.momentum[a:b]
                m.mul_(mu).add_(mean)
                step = mean.add(m, alpha=mu)  # Nesterov
            anchor.sub_(step, alpha=lr)
            params = engine.flat.params[a:b]
            if self.snapshot is None:
                params.copy_(anchor)
            else:  # the new anchor plus the local progress made while its all-reduce travelled
                params.add_(anchor - self.snapshot[a:b])
                self.snapshot[a:b] = params

    def state_dict(self) -> dict:
        state = super().state_dict()
        if self.outer:  # after the engine's flush: landed means kept until their step (outer_delay)
            state["outer"] = {"anchor": self.anchor, "momentum": self.momentum, "residual": self.residual,
                              "snapshot": self.snapshot,
                              "inflight": [(due, t, self._sent[(op, t)][2]()) for (op, t), due in
                                           ((k, k[1] + k[0].lag) for k in self._sent)]}
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
            if (outer.get("residual") is None) != (self.residual is None):
                raise ValueError(f"{self.name}: checkpoint and algo.error_feedback disagree on the residuals")
            if self.residual is not None:
                self.residual.copy_(outer["residual"])
            if self.snapshot is not None:
                self.snapshot.copy_(outer["snapshot"])
            for due, t, mean in outer.get("inflight", []):
                (op,) = self.plan(t)  # the one op of a window's end (outer_delay: flsgd)
                a, b = self.engine.flat.span(op.first, op.last)
                self._sent[(op, t)] = (a, b, lambda m=mean: m)
                self.engine.adopt(due, op, Landed())
        super().load_state_dict(state)

    def outer_describe(self) -> dict:
        """What a run record should know of the outer step and the compression."""
        c = self.cfg
        out = {"outer_optimizer": c.outer_optimizer, "compress": c.compress}
        if c.outer_optimizer == "nesterov":
            out.update(outer_lr=c.outer_lr, outer_momentum=c.outer_momentum)
        if c.compress == "topk":
            out.update(compress_ratio=c.compress_ratio, error_feedback=c.error_feedback)
        elif c.compress == "quant":
            out.update(compress_bits=c.compress_bits, compress_block=c.compress_block, error_feedback=c.error_feedback)
        if hasattr(self, "anchor"):
            out["memory_bytes"] = self.outer_memory_bytes()
        return out

    def outer_memory_bytes(self) -> dict:
        if not self.outer:
            return {}
        size = lambda t: 0 if t is None else 4 * t.numel()  # noqa: E731
        return {"anchor": size(self.anchor), "outer_momentum": size(self.momentum), "residual": size(self.residual)}
