"""Streaming DiLoCo (Douillard et al. 2025, arXiv 2501.18512) on the engine.

Inner loop: every iteration is a LOCAL step of the trainer's optimizer, no
gradient traffic.  The inner optimizer follows the model family's recipe: the
paper's AdamW for the language models (their recipe's Adam becomes AdamW,
decoupled weight decay, with ``algo.inner_adamw``), the ResNets' SGD as it is.

The plan: per fragment p (fragments.py: P groups of blocks, ``sequential`` or
``strided``), one op over its units right after the optimizer step of
iteration t with

    (t + 1) % H == ((p + 1) * H // P) % H          (staggered; P=1: every H-th step)

completed after the step of iteration t + tau (``lag = tau``; 0: at once, blocking).
Everything else is the sync pipeline's (engine/pipeline.py), with this algorithm's
defaults: the fragment's outer gradient ``Delta = anchor - theta`` (``payload=delta``),
its codec (``algo.compress``: none, fp16, e3m0 for the paper's 4-bit), averaged, then
the outer Nesterov step on the anchor and the merge

    theta <- alpha * theta + (1 - alpha) * anchor

(``theta`` has taken tau more local steps since the launch; alpha mixes them in).
Evaluation sees the global model (the anchor, what the workers agree on).

Numerics: P=1, tau=0, alpha=0, outer_lr=1, mu=0 gives ``theta <- mean(theta)``
every H steps = flsgd.  Replicas agree on the anchor bitwise after every merge
(identical means on every rank); between merges they differ like local SGD.
Memory beyond S-SGD: the anchor (one fp32 copy of the model), the outer
optimizer's state and the in-flight payloads (``describe()['memory_bytes']``).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

from dreamddp.algorithms.base import ALGORITHMS, AlgoConfig, Algorithm, Display
from dreamddp.algorithms.fragments import PATTERNS, fragments
from dreamddp.checks import ConfigError, between, choice
from dreamddp.engine.pipeline import outer_copies
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
    # The pipeline's stages, at the paper's values: the outer gradient, outer Nesterov SGD.
    payload: str = "delta"
    outer_optimizer: str = "nesterov"
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
    syncs = "param"
    fixed_timing = "its fragments land algo.tau steps after their launch"

    @classmethod
    def check(cls, cfg) -> None:
        super().check(cfg)
        if not 1 <= cfg.fragments <= cfg.H:
            raise ConfigError(f"algo.fragments={cfg.fragments}: must be between 1 and algo.H={cfg.H}")
        if not 0 <= cfg.tau < cfg.H:
            raise ConfigError(f"algo.tau={cfg.tau}: must be between 0 and algo.H-1={cfg.H - 1}")
        between("algo.alpha", cfg.alpha, 0, 1, open_high=True)  # 1: the replicas would never merge
        choice("algo.fragment_pattern", cfg.fragment_pattern, PATTERNS)
        if cfg.payload != "delta":
            raise ConfigError(f"algo.payload={cfg.payload}: streaming_diloco sends each fragment's change (delta)")

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
        self.offset = sync_offsets(self.H, self.P)
        self.merges: list[tuple[int, int]] = []  # (t, fragment): the schedule as it ran, for records/tests

    def make_plan(self, layout) -> None:
        self.frags = fragments(list(layout.names), self.P, self.cfg.fragment_pattern)
        self.fragment_ops = []
        for f in self.frags:
            (a, b), *more = contiguous_runs(f)
            self.fragment_ops.append(SyncOp(a, b, Payload.PARAM, When.AFTER_STEP, When.AFTER_STEP, lag=self.tau,
                                            more=tuple(more)))
        self._plans = [tuple(self.fragment_ops[p] for p in self.syncs_at(t)) for t in range(self.H)]

    def base_plan(self, t: int):
        return self._plans[t % self.H]

    def syncs_at(self, t: int) -> list[int]:
        return [p for p in range(self.P) if (t + 1) % self.H == self.offset[p]]

    def on_complete(self, engine, op: SyncOp) -> None:
        super().on_complete(engine, op)
        self.merges.append((engine.t, self._fragment(op)))

    def _fragment(self, op: SyncOp) -> int:
        return next(p for p, f in enumerate(self.fragment_ops) if (f.first, f.last, f.more) == (op.first, op.last, op.more))

    @contextmanager
    def evaluation(self, engine):
        """The global model: the anchor in place of the replica's parameters, restored after."""
        params = engine.flat.params
        with torch.no_grad():
            replica = params.clone()
            params.copy_(self.sync.anchor)
        try:
            yield
        finally:
            with torch.no_grad():
                params.copy_(replica)

    def state_dict(self) -> dict:
        return {**super().state_dict(), "merges": list(self.merges)}

    def load_state_dict(self, state: dict) -> None:
        state = dict(state)
        self.merges = [tuple(m) for m in state.pop("merges", [])]
        super().load_state_dict(state)

    def sync_iterations(self, unit: int, H: int) -> list[int]:
        return [t for t in range(H) if any(unit in self.frags[p] for p in self.syncs_at(t))]

    def memory_bytes(self) -> dict:
        """Extra bytes over S-SGD: anchor, outer optimizer state, peak in-flight payloads."""
        flat, codec, world = self.engine.flat, self.sync.codec, self.engine.comm.world_size
        sizes = [sum(b - a for a, b in (flat.span(x, y) for x, y in op.runs)) for op in self.fragment_ops]
        per = [4 * n if codec is None else (world + 1) * codec.nbytes(n) for n in sizes]
        peak = max(sum(per[p] for p in range(self.P) if (t - self.offset[p] + 1) % self.H <= self.tau)
                   for t in range(self.H))
        n = self.sync.anchor.numel()
        return {"anchor": 4 * n, "outer_state": 4 * n * outer_copies(self.cfg), "inflight_peak": peak}

    def describe(self) -> dict:
        out = {**super().describe(), "H": self.H, "fragments": self.P, "fragment_pattern": self.cfg.fragment_pattern,
               "tau": self.tau, "alpha": self.cfg.alpha, "outer_lr": self.cfg.outer_lr,
               "outer_momentum": self.cfg.outer_momentum, "compress": self.cfg.compress, "sync_offsets": self.offset}
        if hasattr(self, "engine"):
            out["fragment_units"] = [len(f) for f in self.frags]
            out["memory_bytes"] = self.memory_bytes()
        return out
