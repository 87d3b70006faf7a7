"""Compressed gradients for the algorithms that average gradients (S-SGD, ASC-WFBP).

With ``algo.compress=topk|quant`` each of the plan's gradient collectives sends its units'
gradient (plus this worker's error-feedback residual) compressed, all-gathered and summed
(compress.py); where the op completes, its gradient slice becomes that mean, and the
optimizer steps on it as on the averaged gradient.  ``none`` is the algorithm as it is.
Replicas stay bitwise identical: every rank computes the same mean.  Memory: the residuals
(one fp32 copy of the gradients), saved in checkpoints.
"""

from __future__ import annotations

from dataclasses import replace

from dreamddp.algorithms.base import Algorithm, op_tag
from dreamddp.algorithms.compress import CompressConfig, check_compress, compressed_mean, make_codec
from dreamddp.engine.plan import Payload, SyncOp
from dreamddp.lazy import lazy

torch = lazy("torch")


class GradCompress(Algorithm):
    Config = CompressConfig

    @classmethod
    def check(cls, cfg) -> None:
        super().check(cfg)
        check_compress(cfg)

    def compressed(self, op: SyncOp, layout) -> SyncOp:
        """``op`` as it travels: in place (none), or its gradient compressed at launch, every
        rank's payload all-gathered (``scale``: those bytes over the fp32 bytes)."""
        codec = make_codec(self.cfg)
        if codec is None or op.payload is not Payload.GRAD:
            return op
        numel = layout.op_bytes(op) // 4
        return replace(op, payload=Payload.OUTER, collective="all_gather",
                       scale=layout.world * codec.nbytes(numel) / (4 * numel))

    def bind(self, engine) -> None:
        super().bind(engine)
        self.codec = make_codec(self.cfg)
        keep = self.codec is not None and self.cfg.error_feedback
        self.residual = torch.zeros_like(engine.flat.grads, dtype=torch.float32) if keep else None
        self._sent: dict = {}

    def launch(self, engine, op: SyncOp):
        if op.payload is not Payload.OUTER:
            return super().launch(engine, op)
        a, b = engine.flat.span(op.first, op.last)
        residual = None if self.residual is None else self.residual[a:b]
        handle, finish = compressed_mean(engine.comm, engine.flat.grads[a:b].float(), self.codec, residual,
                                         tag=op_tag(engine, op, "grad"))
        self._sent[op] = (a, b, finish)
        return handle

    def on_complete(self, engine, op: SyncOp) -> None:
        if op.payload is not Payload.OUTER:
            return super().on_complete(engine, op)
        a, b, finish = self._sent.pop(op)
        with torch.no_grad():
            engine.flat.grads[a:b].copy_(finish())

    def state_dict(self) -> dict:
        state = super().state_dict()
        if self.residual is not None:
            state["residual"] = self.residual
        return state

    def load_state_dict(self, state: dict) -> None:
        state = dict(state)
        residual = state.pop("residual", None)
        if (residual is None) != (self.residual is None):
            raise ValueError(f"{self.name}: checkpoint and algo.error_feedback disagree on the residuals")
        if residual is not None:
            self.check_saved_size("residual", residual.numel(), self.residual.numel())
            self.residual.copy_(residual)
        super().load_state_dict(state)

    def compress_describe(self) -> dict:
        c = self.cfg
        if c.compress == "none":
            return {}
        out = {"compress": c.compress, "error_feedback": c.error_feedback}
        out.update({"compress_ratio": c.compress_ratio} if c.compress == "topk" else
                   {"compress_bits": c.compress_bits, "compress_block": c.compress_block})
        return out
