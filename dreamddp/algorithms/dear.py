"""DeAR (Zhang, Shi et al., ICDCS 2023, arXiv 2302.12445): all-reduce split into a
reduce-scatter during backward and an all-gather pipelined into the NEXT forward.

Fusion: consecutive units (backward order) form groups closed once they hold
``algo.bucket_mb`` MB (schedule.partition.buckets, as ASC-WFBP's buckets).  Per iteration t:

1. backward: when a group's last gradient is ready, its gradient slice is
   reduce-scattered (AVG) into a shard of 1/world of it (asynchronously);
2. ``engine.step`` (the algorithm owns it): snapshot the optimizer's
   hyperparameters (lr of iteration t); with clipping (``layout.grad_clip``),
   the step scales every shard by the clip coefficient of the global norm of
   the averaged gradient, which the end of backward computed: every
   reduce-scatter completes there, then one scalar all-reduce sums every
   rank's shard norms.  The norm needs all groups, so clipping exposes the
   reduce-scatter tail and the ranks' skew at the step;
3. next forward, in forward order: in the pre-hook of a group's first unit,
   wait for its all-gather (launched one group earlier: the first at the start
   of forward), launch the next group's all-gather, then apply the group's
   update with the trainer's optimizer on that group only (substep.py: same
   class, shared state) and zero its gradient slice;
4. ``flush`` (before evaluation, a checkpoint, exit) completes every pending group.

Every collective is in the plan: a reduce-scatter per group (launched at its
gradient, completed in its next forward; with clipping, at the end of
backward), with clipping the norm's all-reduce (a payload made at launch: one
fp32 scalar, launched and completed at the end of backward, so the link
carries it behind the reduce-scatters) and, from the second iteration on, an
all-gather per group (launched in the pre-hook of the group before it in
forward order, completed in its own, where it applies the group's step:
``SyncOp.steps``, so the simulator charges that step there, behind the wait,
and not at the iteration's step, where it would overlap the link).  The plan
of the first iteration after set-up or a flush has no all-gathers: nothing is
pending then.

Choice: the averaged GRADIENT shards are all-gathered and every rank steps
the whole group (not a sharded optimizer that all-gathers parameters).  Every
rank then applies bitwise the same update to bitwise the same gradient, so
this equals S-SGD for any optimizer up to the collectives' summation orders,
with S-SGD's optimizer memory.  (On gloo the reduce-scatter is an all-to-all
and a local sum in rank order, comm/communicator.py, and S-SGD's all-reduce
sums in gloo's ring order: bitwise the same on 2 workers, where either order
adds the same two numbers, otherwise equal up to rounding; tests/test_dear.py.)
The sharded variant would cut optimizer state by the world size but needs
element-wise optimizers.

Memory beyond S-SGD: the shards (model / world) and, for a group whose size
is not a multiple of the world size, a zero-padded copy of its gradient while
in flight (``describe()['memory_bytes']``).  On gloo each collective in flight
also holds its all-to-all's other buffer (not counted there): a reduce-scatter
what it receives (its group's size), an all-gather its shard repeated world
times.  Gradients are zeroed per group by the algorithm (``owns_grad_zeroing``),
since a group's averaged gradient must survive until its next forward.
"""

from __future__ import annotations

from dataclasses import dataclass

from dreamddp.algorithms.ascwfbp import bucket_bytes
from dreamddp.algorithms.base import ALGORITHMS, AlgoConfig, Algorithm, Display
from dreamddp.checks import positive
from dreamddp.engine.plan import Payload, SyncOp, When
from dreamddp.lazy import lazy
from dreamddp.schedule.partition import buckets

torch = lazy("torch")
substep = lazy("dreamddp.engine.substep")

NORM_BYTES = 4  # the gradient norm's all-reduce under clipping: one fp32 scalar


@dataclass
class DeARConfig(AlgoConfig):
    # Fusion buffer size in MB: consecutive units are merged into one reduce-scatter /
    # all-gather group until it holds this much (DeAR's default 25 MB).
    bucket_mb: float = 25.0


@ALGORITHMS.register
class DeAR(Algorithm):
    name = "dear"
    on_shards = ("its reduce-scatter and all-gather of gradients would repeat FSDP's own inside each replica; "
                 "use ssgd (= HSDP) or a parameter-averaging algorithm")
    Config = DeARConfig
    display = Display(30)
    uses_forward_hooks = True
    owns_optimizer_step = True
    owns_grad_zeroing = True
    syncs = "own"  # its reduce-scatters and all-gathers carry the gradient as it is

    @classmethod
    def check(cls, cfg) -> None:
        super().check(cfg)
        positive("algo.bucket_mb", cfg.bucket_mb)

    def make_plan(self, layout) -> None:
        self.groups = buckets(list(layout.nbytes), bucket_bytes(self.cfg))
        self.clips = layout.grad_clip > 0
        done = When.END_OF_BACKWARD if self.clips else When.BEFORE_FORWARD  # the norm needs every shard
        rs = tuple(SyncOp(a, b, Payload.GRAD, When.UNIT_READY, done, "reduce_scatter") for a, b in self.groups)
        if self.clips:  # its bytes: one fp32 scalar, over the bytes of the units it covers
            rs += (SyncOp(0, len(layout) - 1, Payload.OUTER, When.END_OF_BACKWARD, When.END_OF_BACKWARD,
                          scale=NORM_BYTES / layout.run_bytes(0, len(layout) - 1)),)
        ag, at = [], None
        for a, b in sorted(self.groups, key=lambda g: -g[1]):  # forward order: the input side first
            ag.append(SyncOp(a, b, Payload.GRAD, When.BEFORE_FORWARD, When.BEFORE_FORWARD, "all_gather", lag=0, at=at,
                             steps=True))
            at = b
        self._first, self._steady = rs, rs + tuple(ag)
        self._fresh = True  # the next iteration has no all-gathers (nothing pending)
        self.group_of = {b: g for g, (_, b) in enumerate(self.groups)}  # keyed by a group's last unit

    def base_plan(self, t: int):
        if self._fresh:  # the one stateful plan: set up or flushed since the last iteration
            self._fresh = False
            return self._first
        return self._steady

    def bind(self, engine) -> None:
        super().bind(engine)
        self.world = engine.comm.world_size
        self.inflight: list[dict | None] = [None] * len(self.groups)
        self.pending: set[int] = set()  # groups whose update waits for their next forward
        self.steppers = None
        self.memory = self._memory(engine)
        engine.flat.zero_grads()  # from here on the algorithm zeroes (warm-up passes left gradients)

    def launch(self, engine, op: SyncOp):
        if op.payload is Payload.OUTER:
            return self._launch_norm(engine)
        g = self.group_of[op.last]
        if op.collective == "all_gather":
            return self._launch_ag(engine, g)
        if g in self.pending:  # its units skipped their forward: apply last update first
            engine.complete_before_forward(op.last)  # its all-gather, if already launched
            if g in self.pending:
                self._finish(engine, g, self._launch_ag(engine, g))
        grad = engine.tensor(op)
        n = -(-grad.numel() // self.world)
        padded = grad.numel() != n * self.world
        src = grad
        if padded:
            src = torch.zeros(n * self.world, dtype=grad.dtype, device=grad.device)
            src[: grad.numel()].copy_(grad)
        shard = torch.empty(n, dtype=grad.dtype, device=grad.device)
        rs = engine.comm.reduce_scatter_avg(src, shard, tag=f"rs:{op.first}-{op.last}")
        self.inflight[g] = {"src": src, "padded": padded, "shard": shard, "rs": rs}
        return rs  # the engine also waits it before the group's forward (a no-op by then)

    def _launch_norm(self, engine):
        """The mean over ranks of their shards' squared norms (the reduce-scatters are done first)."""
        for s in self.inflight:
            engine.stats.wait += s["rs"].wait()
        self.sq = torch.stack([s["shard"].float().square().sum() for s in self.inflight]).sum().reshape(1)
        return engine.comm.all_reduce_avg(self.sq, tag="grad_norm")

    def optimizer_step(self, engine, optimizer, grad_clip: float) -> None:
        if self.steppers is None:
            self.steppers = [substep.SubsetStepper(optimizer, substep.unit_params(engine, range(a, b + 1)))
                             for a, b in self.groups]
        self.hyper = substep.snapshot(optimizer)
        substep.mark_stepped(optimizer)
        self.coef = None
        if grad_clip > 0:  # the norm's all-reduce completed at the end of backward
            total = self.sq.mul_(self.world).sqrt_()
            engine.stats.grad_norm = total
            self.coef = torch.clamp(grad_clip / (total + 1e-6), max=1.0)  # FlatModel.clip_grad_norm_'s rule
        self.pending = set(range(len(self.groups)))

    def _launch_ag(self, engine, g: int):
        s = self.inflight[g]
        engine.stats.wait += s["rs"].wait()
        if self.coef is not None:
            s["shard"].mul_(self.coef)
        # The reduce-scatter's input is free now: gather into it (the gradient slice itself when unpadded).
        a, b = self.groups[g]
        return engine.comm.all_gather(s["src"], s["shard"], tag=f"ag:{a}-{b}")

    def on_complete(self, engine, op: SyncOp) -> None:
        if op.steps:  # the group's all-gather
            self._apply(engine, self.group_of[op.last])

    def _apply(self, engine, g: int) -> None:
        """The group's averaged gradient is whole: step the group, zero its gradient."""
        s = self.inflight[g]
        a, b = self.groups[g]
        grad = engine.flat.grad_slice(a, b)
        with torch.no_grad():
            if s["padded"]:
                grad.copy_(s["src"][: grad.numel()])
            self.steppers[g].step(self.hyper)
            grad.zero_()
        self.inflight[g] = None
        self.pending.discard(g)

    def _finish(self, engine, g: int, handle) -> None:
        engine.stats.wait += handle.wait()
        self._apply(engine, g)

    def flush(self, engine) -> None:
        # The engine completed the all-gathers already launched; the rest go out now, in
        # forward order, and the next iteration's plan starts without all-gathers.
        for g in sorted(self.pending, key=lambda g: -self.groups[g][1]):
            self._finish(engine, g, self._launch_ag(engine, g))
        self._fresh = True

    def _memory(self, engine) -> dict:
        sizes = [engine.flat.grad_slice(a, b).numel() for a, b in self.groups]
        shards = [-(-n // self.world) for n in sizes]
        pads = [s * self.world for n, s in zip(sizes, shards) if n != s * self.world]
        elem = engine.flat.grads.element_size()
        return {"shards": elem * sum(shards), "padded_copies": elem * sum(pads)}

    def describe(self) -> dict:
        out = {"name": self.name, "bucket_mb": self.cfg.bucket_mb,
               "update": "all-gather averaged gradient shards, step each group locally"}
        if hasattr(self, "groups"):
            out.update(groups=[list(g) for g in self.groups], clip_norm_all_reduce=self.clips)
        if hasattr(self, "memory"):
            out.update(memory_bytes=self.memory)
        return out
