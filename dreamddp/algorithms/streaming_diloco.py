"""Streaming DiLoCo (Douillard et al. 2025, arXiv 2501.18512) on the engine.

Inner loop: every iteration is a LOCAL step of the trainer's optimizer, no
gradient traffic.  The inner optimizer follows the model family's recipe: the
paper's AdamW for the language models (their recipe's Adam becomes AdamW,
decoupled weight decay, with ``algo.inner_adamw``), the ResNets' SGD as it is.

Outer loop, per fragment p (fragments.py: P groups of blocks, ``sequential`` or
``strided``), right after the optimizer step of iteration t with

    (t + 1) % H == ((p + 1) * H // P) % H          (staggered; P=1: every H-th step)

1. launch: outer gradient ``delta = anchor - theta_local`` of the fragment, fp32,
   averaged asynchronously: a ring all-reduce (``quantize=none``) or an
   all-gather of fp16 / 4-bit E3M0 payloads summed in FP32 (quantize.py);
2. merge, after the optimizer step of iteration t + tau (tau = 0: at once,
   blocking), with the mean ``Delta``::

       m      <- mu * m + Delta                     (outer SGD, Nesterov, as torch.optim.SGD)
       anchor <- anchor - outer_lr * (Delta + mu * m)  (= theta_global_new)
       theta  <- alpha * theta + (1 - alpha) * anchor

   ``theta`` has taken tau more local steps since the launch; alpha mixes them in.

Per iteration: launches first, then merges due at t (fragments are disjoint
and tau < H, so a fragment never launches and merges in one step unless tau=0).

Evaluation sees the global model (the anchor, what the workers agree on), not
the local replicas.

Numerics: P=1, tau=0, alpha=0, outer_lr=1, mu=0 gives ``theta <- mean(theta)``
every H steps = flsgd.  Replicas agree on the anchor bitwise after every merge
(identical means on every rank); between merges they differ like local SGD.

Memory beyond S-SGD: the anchor (one fp32 copy of the model), the outer
momentum (another, when mu > 0) and the in-flight buffers (the fragments'
outer gradients or payloads, ``describe()['memory_bytes']``).

Not through the engine's plan: the payload is derived (anchor - theta) and
completes tau steps later, so ``plan`` is empty and the algorithm launches
from ``after_optimizer_step``; the engine still drains and accounts the bytes.
``flush`` completes the transfers but keeps each merge at its scheduled step,
so evaluation frequency never changes the training trajectory.  A checkpoint
(``state_dict``) carries the anchor, the outer momentum and every landed but
unmerged mean, so a resumed run merges them at the same steps.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

from dreamddp.algorithms.base import ALGORITHMS, AlgoConfig, Algorithm, Display
from dreamddp.algorithms.fragments import PATTERNS, fragments
from dreamddp.algorithms.quantize import Codec, check_codec, gather_mean
from dreamddp.checks import ConfigError, between, choice, positive
from dreamddp.engine.plan import contiguous_runs
from dreamddp.lazy import lazy
from dreamddp.schedule.simulator import IterPlan

torch = lazy("torch")


@dataclass
class StreamingDiLoCoConfig(AlgoConfig):
    # Number of fragments P (1 = plain DiLoCo); 1 <= P <= H.  Each still syncs once per H.
    fragments: int = 1
    # sequential | strided grouping of the model's blocks into fragments.
    fragment_pattern: str = "strided"
    # Steps between launching a fragment's outer all-reduce and merging it (0 = blocking).
    tau: int = 0
    # Merge mix: theta_local <- alpha * theta_local + (1 - alpha) * theta_global.
    alpha: float = 0.0
    # Outer SGD learning rate (the paper's 0.7).
    outer_lr: float = 0.7
    # Outer SGD Nesterov momentum (0 = plain SGD; the paper's 0.9).
    outer_momentum: float = 0.9
    # Outer-gradient encoding on the wire: none (fp32 all-reduce) | fp16 | e3m0 (4-bit, FP32 sums).
    quantize: str = "none"
    # Elements per E3M0 scale block; 0 = one scale per fragment.
    quant_block: int = 1024
    # Inner optimizer: a recipe's adam becomes adamw (the paper's inner AdamW, for the
    # language models); sgd recipes (ResNets) keep sgd.  false = train.optimizer as given.
    inner_adamw: bool = True


def sync_offsets(H: int, P: int) -> list[int]:
    """The stagger: fragment p syncs after the step of iterations t with (t + 1) % H == offset[p]."""
    return [((p + 1) * H // P) % H for p in range(P)]


@ALGORITHMS.register
class StreamingDiLoCo(Algorithm):
    name = "streaming_diloco"
    Config = StreamingDiLoCoConfig
    display = Display("Streaming DiLoCo", 60, periodic=True)

    @classmethod
    def check(cls, cfg) -> None:
        super().check(cfg)
        if not 1 <= cfg.fragments <= cfg.H:
            raise ConfigError(f"algo.fragments={cfg.fragments}: must be between 1 and algo.H={cfg.H}")
        if not 0 <= cfg.tau < cfg.H:
            raise ConfigError(f"algo.tau={cfg.tau}: must be between 0 and algo.H-1={cfg.H - 1}")
        between("algo.alpha", cfg.alpha, 0, 1)
        positive("algo.outer_lr", cfg.outer_lr)
        between("algo.outer_momentum", cfg.outer_momentum, 0, 1, open_high=True)
        choice("algo.fragment_pattern", cfg.fragment_pattern, PATTERNS)
        check_codec(cfg.quantize, cfg.quant_block)

    @classmethod
    def optimizer_name(cls, cfg, train) -> str:
        return "adamw" if cfg.inner_adamw and train.optimizer == "adam" else train.optimizer

    def __init__(self, cfg, setup: dict | None = None):
        super().__init__(cfg, setup)
        self.H, self.P, self.tau = cfg.H, cfg.fragments, cfg.tau
        self.alpha, self.outer_lr, self.mu = cfg.alpha, cfg.outer_lr, cfg.outer_momentum
        self.codec = Codec(cfg.quantize, cfg.quant_block)
        self.offset = sync_offsets(self.H, self.P)

    def bind(self, engine) -> None:
        flat = engine.flat
        self._world = engine.comm.world_size
        self.frags = fragments([u.name for u in engine.units], self.P, self.cfg.fragment_pattern)
        self.spans = [[flat.span(a, b) for a, b in contiguous_runs(f)] for f in self.frags]
        self.anchor = flat.params.detach().float().clone()
        self.momentum = torch.zeros_like(self.anchor) if self.mu > 0 else None
        self.inflight: list[tuple[int, int, object, object]] = []  # (due t, fragment, handle, result)
        self.merges: list[tuple[int, int]] = []  # (t, fragment): the schedule as it ran, for records/tests

    def plan(self, t: int):
        return ()

    def syncs_at(self, t: int) -> list[int]:
        return [p for p in range(self.P) if (t + 1) % self.H == self.offset[p]]

    def after_optimizer_step(self, engine) -> None:
        t = engine.t
        for p in self.syncs_at(t):
            self._launch(engine, t, p)
        due = [job for job in self.inflight if job[0] <= t]
        self.inflight = [job for job in self.inflight if job[0] > t]
        for _, p, handle, result in due:
            engine.stats.wait += handle.wait()
            self._merge(engine, p, result())
            self.merges.append((t, p))

    def _launch(self, engine, t: int, p: int) -> None:
        params = engine.flat.params
        delta = torch.cat([self.anchor[a:b] - params[a:b] for a, b in self.spans[p]])
        tag = f"outer:{p}"
        if self.codec.kind == "none":
            handle, result = engine.comm.all_reduce_avg(delta, tag=tag), (lambda: delta)
        else:
            handle, result = gather_mean(engine.comm, delta, self.codec, tag=tag)
        self.inflight.append((t + self.tau, p, handle, result))

    def _merge(self, engine, p: int, mean: torch.Tensor) -> None:
        params, pos = engine.flat.params, 0
        with torch.no_grad():
            for a, b in self.spans[p]:  # a few runs per fragment, flat ops on each
                g = mean[pos : pos + b - a]
                pos += b - a
                if self.momentum is not None:
                    m = self.momentum[a:b]
                    m.mul_(self.mu).add_(g)
                    g = g.add(m, alpha=self.mu)  # Nesterov
                anchor = self.anchor[a:b]
                anchor.sub_(g, alpha=self.outer_lr)
                params[a:b].mul_(self.alpha).add_(anchor.to(params.dtype), alpha=1 - self.alpha)

    @contextmanager
    def evaluation(self, engine):
        """The global model: the anchor in place of the replica's parameters, restored after."""
        params = engine.flat.params
        with torch.no_grad():
            replica = params.clone()
            params.copy_(self.anchor)
        try:
            yield
        finally:
            with torch.no_grad():
                params.copy_(replica)

    def flush(self, engine) -> None:
        for _, _, handle, _ in self.inflight:  # transfers done; merges stay on schedule
            engine.stats.wait += handle.wait()

    def state_dict(self) -> dict:
        # After flush every transfer has landed: keep each mean until its scheduled merge.
        return {
            "anchor": self.anchor, "momentum": self.momentum, "merges": list(self.merges),
            "inflight": [(due, p, result()) for due, p, _, result in self.inflight],
        }

    def load_state_dict(self, state: dict) -> None:
        self.anchor.copy_(state["anchor"])
        if (state["momentum"] is None) != (self.momentum is None):
            raise ValueError("streaming_diloco: checkpoint and algo.outer_momentum disagree on outer momentum state")
        if self.momentum is not None:
            self.momentum.copy_(state["momentum"])
        self.merges = [tuple(m) for m in state["merges"]]
        self.inflight = [(due, p, _Landed(), (lambda m=mean: m)) for due, p, mean in state["inflight"]]

    def sync_iterations(self, unit: int, H: int) -> list[int]:
        return [t for t in range(H) if any(unit in self.frags[p] for p in self.syncs_at(t))]

    def memory_bytes(self, world: int) -> dict:
        """Extra bytes over S-SGD: anchor, outer momentum, peak in-flight buffers."""
        sizes = [sum(b - a for a, b in s) for s in self.spans]
        if self.codec.kind == "none":
            per = [4 * n for n in sizes]  # the fp32 outer gradient being all-reduced
        else:  # own payload + every rank's gathered payload
            per = [(world + 1) * self.codec.nbytes(n) for n in sizes]
        peak = max(
            sum(per[p] for p in range(self.P) if (t - self.offset[p] + 1) % self.H <= self.tau)
            for t in range(self.H)
        )
        return {
            "anchor": self.anchor.numel() * 4,
            "outer_momentum": 0 if self.momentum is None else self.momentum.numel() * 4,
            "inflight_peak": peak,
        }

    @classmethod
    def simulation(cls, ctx):
        """Fragments staggered over H, each outer all-reduce (or all-gather of fp16 / E3M0
        payloads) launched after the step and waited tau steps later."""
        c = ctx.cfg
        frags = fragments(ctx.profile.units, c.fragments, c.fragment_pattern)
        offsets = sync_offsets(ctx.H, c.fragments)
        if c.quantize == "none":
            seconds = [ctx.collective_as(f, "all_reduce") for f in frags]
        else:  # every rank's payload gathered: world x (payload bytes per fp32 byte)
            codec, numel = Codec(c.quantize, c.quant_block), 2**20
            scale = ctx.world * codec.nbytes(numel) / (4 * numel)
            seconds = [ctx.collective_as(f, "all_gather", scale) for f in frags]
        plans = [IterPlan(lagged=[(seconds[p], c.tau) for p in range(c.fragments) if (t + 1) % ctx.H == offsets[p]])
                 for t in range(ctx.H)]
        return lambda t: plans[t % ctx.H]

    def describe(self) -> dict:
        out = {
            "name": self.name, "H": self.H, "fragments": self.P, "fragment_pattern": self.cfg.fragment_pattern,
            "tau": self.tau, "alpha": self.alpha, "outer_lr": self.outer_lr, "outer_momentum": self.mu,
            "quantize": self.codec.kind, "quant_block": self.codec.block, "sync_offsets": self.offset,
        }
        if hasattr(self, "frags"):
            out["fragment_units"] = [len(f) for f in self.frags]
            out["memory_bytes"] = self.memory_bytes(self._world)
        return out


class _Landed:
    """The handle of a transfer completed before a checkpoint was taken."""

    def wait(self) -> float:
        return 0.0
