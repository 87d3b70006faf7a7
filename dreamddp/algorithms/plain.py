"""Plain local training: the bare model and optimizer, no engine, no communication.

The baseline of the engine's own cost: ``nosync`` runs the same training on
the engine (flat buffers, gradient-ready hooks, per-iteration accounting) with
nothing to synchronise, so nosync / plain is what the machinery costs.
Replicas drift apart from the first step: not a training method.
"""

from __future__ import annotations

from dreamddp.algorithms.base import ALGORITHMS, Algorithm, Display
from dreamddp.lazy import lazy

passthrough = lazy("dreamddp.engine.passthrough")


@ALGORITHMS.register
class Plain(Algorithm):
    name = "plain"
    on_shards = "runs the bare model without the engine; use nosync for FSDP alone"
    display = Display(95)
    on_engine = False

    @classmethod
    def make_engine(cls, model, units, comm, ctx, *, cfg, sample_every: int, grad_clip: float = 0.0):
        """The bare model behind the engine's lifecycle calls: no hooks, no flat buffers."""
        return passthrough.PassthroughEngine(model, units, 0, grad_clip), model
