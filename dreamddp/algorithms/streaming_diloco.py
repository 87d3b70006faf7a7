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

The plan states it: in iteration t, one op per fragment that syncs, a
derived payload (``Payload.OUTER``, over the fragment's runs of units)
launched after the step and completed after the step of t + tau
(``lag=tau``); an all-gather whose payload is the codec's share of the fp32
bytes times the world size when quantised.  The engine's ``flush`` lets the
transfers land but keeps each merge at its scheduled step, so evaluation
frequency never changes the training trajectory.  A checkpoint
(``state_dict``) carries the anchor, the outer momentum and every landed but
unmerged mean, so a resumed run merges them at the same steps.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

from dreamddp.algorithms.base import ALGORITHMS, AlgoConfig, Algorithm, Display, Landed
from dreamddp.algorithms.fragments import PATTERNS, fragments
from dreamddp.algorithms.quantize import Codec, check_codec, gather_mean
from dreamddp.checks import ConfigError, between, choice, positive
from dreamddp.engine.plan import Payload, SyncOp, When, contiguous_runs
from dreamddp.lazy import lazy

torch = lazy("torch")


@dataclass
class StreamingDiLoCoConfig(AlgoConfig):
    # Number of fragments P (1 = plain DiLoCo); 1 <= P <= H.  Each still syncs once per H.
    fragments: int = 1
    # sequential | strided grouping of the model's blocks into fragments.
    fragment_pattern: str = "strided"
    # Steps between launching a fragment's outer all-reduce and merging it (0 = blocking).
    tau: int = 0
    # Merge mix: theta_local <- alpha * theta_local + (1 - alpha) * theta_global; in [0, 1) (1: never merged).
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
    display = Display(60, periodic=True)

    @classmethod
    def check(cls, cfg) -> None:
        super().check(cfg)
        if not 1 <= cfg.fragments <= cfg.H:
            raise ConfigError(f"algo.fragments={cfg.fragments}: must be between 1 and algo.H={cfg.H}")
        if not 0 <= cfg.tau < cfg.H:
            raise ConfigError(f"algo.tau={cfg.tau}: must be between 0 and algo.H-1={cfg.H - 1}")
        between("algo.alpha", cfg.alpha, 0, 1, open_high=True)  # 1: the replicas would never merge
        positive("algo.outer_lr", cfg.outer_lr)
        between("algo.outer_momentum", cfg.outer_momentum, 0, 1, open_high=True)
        choice("algo.fragment_pattern", cfg.fragment_pattern, PATTERNS)
        check_codec(cfg.quantize, cfg.quant_block)

    @classmethod
    def check_model(cls, cfg, layout) -> None:
        """The fragments must fit the model's blocks, before any worker starts."""
        try:
            fragments(list(layout()[0]), cfg.fragments, cfg.fragment_pattern)
        except ValueError as e:
            raise ConfigError(str(e)) from None

    @classmethod
    def merges_late(cls, cfg) -> bool:
        return cfg.tau > 0

    @classmethod
    def optimizer_name(cls, cfg, train) -> str:
        return "adamw" if cfg.inner_adamw and train.optimizer == "adam" else train.optimizer

    def __init__(self, cfg, setup: dict | None = None):
        super().__init__(cfg, setup)
        self.H, self.P, self.tau = cfg.H, cfg.fragments, cfg.tau
        self.alpha, self.outer_lr, self.mu = cfg.alpha, cfg.outer_lr, cfg.outer_momentum
        self.codec = Codec(cfg.quantize, cfg.quant_block)
        self.offset = sync_offsets(self.H, self.P)

    def bind_plan(self, layout) -> None:
        self.frags = fragments(list(layout.names), self.P, self.cfg.fragment_pattern)
        if self.codec.kind == "none":
            kind, scale = "all_reduce", 1.0
        else:  # every rank's payload gathered: world x (payload bytes per fp32 byte)
            numel = 2**20
            kind, scale = "all_gather", layout.world * self.codec.nbytes(numel) / (4 * numel)
        self.fragment_ops = []
        for f in self.frags:
            (a, b), *more = contiguous_runs(f)
            self.fragment_ops.append(SyncOp(a, b, Payload.OUTER, When.AFTER_STEP, When.AFTER_STEP, kind, lag=self.tau,
                                   more=tuple(more), scale=scale))
        self._plans = [tuple(self.fragment_ops[p] for p in self.syncs_at(t)) for t in range(self.H)]

    def plan(self, t: int):
        return self._plans[t % self.H]

    def bind(self, engine) -> None:
        super().bind(engine)
        flat = engine.flat
        self._world = engine.comm.world_size
        self.spans = [[flat.span(a, b) for a, b in op.runs] for op in self.fragment_ops]
        self.fragment_of = {op: p for p, op in enumerate(self.fragment_ops)}
        self.anchor = flat.params.detach().float().clone()
        self.momentum = torch.zeros_like(self.anchor) if self.mu > 0 else None
        self.results: dict = {}  # op in flight -> its mean, once landed
        self.merges: list[tuple[int, int]] = []  # (t, fragment): the schedule as it ran, for records/tests

    def syncs_at(self, t: int) -> list[int]:
        return [p for p in range(self.P) if (t + 1) % self.H == self.offset[p]]

    def launch(self, engine, op: SyncOp):
        p = self.fragment_of[op]
        params = engine.flat.params
        delta = torch.cat([self.anchor[a:b] - params[a:b] for a, b in self.spans[p]])
        tag = f"outer:{p}"
        if self.codec.kind == "none":
            handle, result = engine.comm.all_reduce_avg(delta, tag=tag), (lambda: delta)
        else:
            handle, result = gather_mean(engine.comm, delta, self.codec, tag=tag)
        self.results[op] = result
        return handle

    def on_complete(self, engine, op: SyncOp) -> None:
        p = self.fragment_of[op]
        self._merge(engine, p, self.results.pop(op)())
        self.merges.append((engine.t, p))

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

    def state_dict(self) -> dict:
        # After the engine's flush every transfer has landed: keep each mean until its merge.
        return {
            "anchor": self.anchor, "momentum": self.momentum, "merges": list(self.merges),
            "inflight": [(due, self.fragment_of[op], self.results[op]()) for due, op in self.engine.in_flight()],
        }

    def load_state_dict(self, state: dict) -> None:
        self.check_saved_size("anchor", state["anchor"].numel(), self.anchor.numel())
        self.anchor.copy_(state["anchor"])
        if (state["momentum"] is None) != (self.momentum is None):
            raise ValueError("streaming_diloco: checkpoint and algo.outer_momentum disagree on outer momentum state")
        if self.momentum is not None:
            self.momentum.copy_(state["momentum"])
        self.merges = [tuple(m) for m in state["merges"]]
        for due, p, mean in state["inflight"]:
            self.results[self.fragment_ops[p]] = lambda m=mean: m
            self.engine.adopt(due, self.fragment_ops[p], Landed())

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

    def describe(self) -> dict:
        out = {
            "name": self.name, "H": self.H, "fragments": self.P, "fragment_pattern": self.cfg.fragment_pattern,
            "tau": self.tau, "alpha": self.alpha, "outer_lr": self.outer_lr, "outer_momentum": self.mu,
            "quantize": self.codec.kind, "quant_block": self.codec.block, "sync_offsets": self.offset,
        }
        if hasattr(self, "spans"):
            out["fragment_units"] = [len(f) for f in self.frags]
            out["memory_bytes"] = self.memory_bytes(self._world)
        return out
