"""DeAR (Zhang, Shi et al., ICDCS 2023, arXiv 2302.12445): all-reduce split into a
reduce-scatter during backward and an all-gather pipelined into the NEXT forward.

Fusion: consecutive units (backward order) form groups closed once they hold
``algo.bucket_mb`` MB (schedule.partition.buckets, as ASC-WFBP's buckets).  Per iteration t:

1. backward: when a group's last gradient is ready, its gradient slice is
   reduce-scattered (AVG) into a shard of 1/world of it (asynchronously);
2. ``engine.step`` (the algorithm owns it): snapshot the optimizer's
   hyperparameters (lr of iteration t); with clipping, wait for every
   reduce-scatter and clip with the global norm of the averaged gradient
   (sum of every rank's shard norms, one scalar all-reduce): the norm needs
   all groups, so clipping exposes the reduce-scatter tail at the step;
3. next forward, in forward order: in the pre-hook of a group's first unit,
   wait for its all-gather (launched one group earlier: the first at the first
   pre-hook), launch the next group's all-gather, then apply the group's
   update with the trainer's optimizer on that group only (substep.py: same
   class, shared state) and zero its gradient slice;
4. ``flush`` (before evaluation, a checkpoint, exit) completes every pending group.

Choice: the averaged GRADIENT shards are all-gathered and every rank steps
the whole group (not a sharded optimizer that all-gathers parameters).  Every
rank then applies bitwise the same update to bitwise the same gradient, so
this equals S-SGD for any optimizer (up to the collective's summation order),
with S-SGD's optimizer memory; the sharded variant would cut optimizer state
by the world size but needs element-wise optimizers.

Memory beyond S-SGD: the shards (model / world) and, for a group whose size
is not a multiple of the world size, a zero-padded copy of its gradient while
in flight (``describe()['memory_bytes']``).  Gradients are zeroed per group
by the algorithm (``owns_grad_zeroing``), since a group's averaged gradient
must survive until its next forward.
"""

from __future__ import annotations

from dataclasses import dataclass

from dreamddp.algorithms.ascwfbp import bucket_bytes
from dreamddp.algorithms.base import ALGORITHMS, AlgoConfig, Algorithm, Display
from dreamddp.checks import positive
from dreamddp.engine.plan import Payload, SyncOp, When
from dreamddp.lazy import lazy
from dreamddp.schedule.partition import buckets
from dreamddp.schedule.simulator import IterPlan

torch = lazy("torch")
substep = lazy("dreamddp.engine.substep")


@dataclass
class DeARConfig(AlgoConfig):
    # Fusion buffer size in MB: consecutive units are merged into one reduce-scatter /
    # all-gather group until it holds this much (DeAR's default 25 MB).
    bucket_mb: float = 25.0


@ALGORITHMS.register
class DeAR(Algorithm):
    name = "dear"
    Config = DeARConfig
    display = Display("DeAR", 30)
    uses_forward_hooks = True
    owns_optimizer_step = True
    owns_grad_zeroing = True

    @classmethod
    def check(cls, cfg) -> None:
        super().check(cfg)
        positive("algo.bucket_mb", cfg.bucket_mb)

    def bind(self, engine) -> None:
        self.groups = buckets([u.nbytes for u in engine.units], bucket_bytes(self.cfg))
        self._plan = tuple(
            SyncOp(a, b, Payload.GRAD, When.UNIT_READY, When.BEFORE_FORWARD, "reduce_scatter") for a, b in self.groups
        )
        self.group_of = [g for g, (a, b) in enumerate(self.groups) for _ in range(a, b + 1)]
        self.world = engine.comm.world_size
        self.inflight: list[dict | None] = [None] * len(self.groups)
        self.pending: set[int] = set()  # groups whose update waits for their next forward
        self.next_ag = -1  # groups above this index have their all-gather launched
        self.steppers = None
        self.memory = self._memory(engine)
        engine.flat.zero_grads()  # from here on the algorithm zeroes (warm-up passes left gradients)

    def plan(self, t: int):
        return self._plan

    def launch(self, engine, op: SyncOp, grad: torch.Tensor):
        g = self.group_of[op.first]
        if g in self.pending:  # its units skipped their forward: apply last update first
            self._complete(engine, g)
        n = -(-grad.numel() // self.world)
        padded = grad.numel() != n * self.world
        src = grad
        if padded:
            src = torch.zeros(n * self.world, dtype=grad.dtype, device=grad.device)
            src[: grad.numel()].copy_(grad)
        shard = torch.empty(n, dtype=grad.dtype, device=grad.device)
        rs = engine.comm.reduce_scatter_avg(src, shard, tag=f"rs:{op.first}-{op.last}")
        self.inflight[g] = {"src": src, "padded": padded, "shard": shard, "rs": rs, "ag": None}
        return rs  # the engine also waits it before the group's forward (a no-op by then)

    def optimizer_step(self, engine, optimizer, grad_clip: float) -> None:
        if self.steppers is None:
            self.steppers = [substep.SubsetStepper(optimizer, substep.unit_params(engine, range(a, b + 1)))
                             for a, b in self.groups]
        self.hyper = substep.snapshot(optimizer)
        substep.mark_stepped(optimizer)
        self.coef = None
        if grad_clip > 0:
            for s in self.inflight:
                engine.stats.wait += s["rs"].wait()
            sq = torch.stack([s["shard"].float().square().sum() for s in self.inflight]).sum().reshape(1)
            engine.stats.wait += engine.comm.all_reduce_avg(sq, tag="grad_norm").wait()
            total = sq.mul_(self.world).sqrt_()
            engine.stats.grad_norm = float(total)
            self.coef = torch.clamp(grad_clip / (total + 1e-6), max=1.0)  # FlatModel.clip_grad_norm_'s rule
        self.pending = set(range(len(self.groups)))
        self.next_ag = len(self.groups) - 1

    def _launch_ag(self, engine) -> None:
        g, self.next_ag = self.next_ag, self.next_ag - 1
        s = self.inflight[g]
        engine.stats.wait += s["rs"].wait()
        if self.coef is not None:
            s["shard"].mul_(self.coef)
        # The reduce-scatter's input is free now: gather into it (the gradient slice itself when unpadded).
        s["ag"] = engine.comm.all_gather(s["src"], s["shard"], tag=f"ag:{self.groups[g][0]}-{self.groups[g][1]}")

    def _complete(self, engine, g: int) -> None:
        while self.next_ag >= g:  # normally already launched, one group ahead
            self._launch_ag(engine)
        s = self.inflight[g]
        engine.stats.wait += s["ag"].wait()
        if self.next_ag >= 0:  # pipeline: the next group's all-gather overlaps this group's forward
            self._launch_ag(engine)
        a, b = self.groups[g]
        grad = engine.flat.grad_slice(a, b)
        with torch.no_grad():
            if s["padded"]:
                grad.copy_(s["src"][: grad.numel()])
            self.steppers[g].step(self.hyper)
            grad.zero_()
        self.inflight[g] = None
        self.pending.discard(g)

    def before_unit_forward(self, engine, unit: int) -> None:
        g = self.group_of[unit]
        if g in self.pending:
            self._complete(engine, g)

    def flush(self, engine) -> None:
        for g in sorted(self.pending, reverse=True):  # forward order
            self._complete(engine, g)

    def _memory(self, engine) -> dict:
        sizes = [engine.flat.grad_slice(a, b).numel() for a, b in self.groups]
        shards = [-(-n // self.world) for n in sizes]
        pads = [s * self.world for n, s in zip(sizes, shards) if n != s * self.world]
        elem = engine.flat.grads.element_size()
        return {"shards": elem * sum(shards), "padded_copies": elem * sum(pads)}

    @classmethod
    def simulation(cls, ctx):
        """Reduce-scatter per fused group at its last gradient; all-gathers chained through the
        next forward (the first at its start, each next one at the previous group's pre-hook)."""
        groups = ctx.buckets(bucket_bytes(ctx.cfg))  # backward order; a group's forward-first unit is its highest index
        rs = [(g[-1], ctx.collective_as(g, "reduce_scatter"), g[-1]) for g in groups]
        chain, at = [], None
        for g in sorted(groups, key=lambda g: -g[-1]):
            chain.append((at, ctx.collective_as(g, "all_gather"), g[-1]))
            at = g[-1]
        plan = IterPlan(deferred=rs, next_forward=chain)
        return lambda t: plan

    def describe(self) -> dict:
        out = {"name": self.name, "bucket_mb": self.cfg.bucket_mb,
               "update": "all-gather averaged gradient shards, step each group locally"}
        if hasattr(self, "groups"):
            out.update(groups=[list(g) for g in self.groups], memory_bytes=self.memory)
        return out
