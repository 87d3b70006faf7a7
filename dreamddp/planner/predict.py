"""One prediction: a recipe (an algorithm and its options) on a model and a cluster, timed by the
simulator, and the slow-link rate a target compute utilization needs.

The algorithm is built as the trainer builds it: its set-up from a profile of the model's
units (``setup_from_profile``: DreamDDP's schedule, planned on this link's per-unit all-reduce
times), ``build_algorithm``, bound to a torch-free ``UnitLayout`` of the units with the world
size the cluster has (``bind_plan``); ``simulate_plan`` times its ``plan(t)`` for one rank, each
collective charged the two-level link's seconds (planner/link.py).  The world size enters only
the link cost and what the plan sends (a compressed all-gather carries every rank's payload).

Compute utilization = compute seconds / iteration seconds, compute being forward, backward and
the optimizer step of one iteration with no communication, at the slowest worker's pace
(every worker takes as many steps, so each sync waits for it: forward and backward are
stretched by 1 / the slowest speed, as ``dreamddp/speed.py`` stretches them).
"""

from __future__ import annotations

import math
from pathlib import Path
from dataclasses import dataclass, field, fields

import numpy as np

from dreamddp.algorithms import ALGORITHMS, build_algorithm
from dreamddp.checks import ConfigError
from dreamddp.engine.layout import UnitLayout
from dreamddp.planner.link import HierLink
from dreamddp.planner.spec import Cluster, Model
from dreamddp.schedule.profile import Profile
from dreamddp.schedule.compute import Compute
from dreamddp.schedule.simulator import simulate_plan


@dataclass(frozen=True)
class Recipe:
    """A named algorithm with options; ``fragment_layers``: Streaming DiLoCo's fragments as
    this many blocks each (P = ceil(blocks / fragment_layers), at most H)."""

    name: str
    algo: str
    options: dict = field(default_factory=dict)
    label: str = ""
    fragment_layers: int | None = None

    def config(self, model: Model, H: int, fragment_layers: int | None = None):
        cls = ALGORITHMS.lookup(self.algo)
        options = dict(self.options)
        per = None if self.fragment_layers is None else (fragment_layers or self.fragment_layers)
        if per is not None:
            options["fragments"] = min(H, math.ceil(blocks(model) / per))
        known = {f.name for f in fields(cls.Config)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ConfigError(f"recipe {self.name}: algo.{unknown[0]} is not an option of algo={self.algo}")
        cfg = cls.Config(name=self.algo, H=H, **options)
        cls.check(cfg)
        return cfg


RECIPES: dict[str, Recipe] = {r.name: r for r in (
    Recipe("ssgd", "ssgd", label="S-SGD"),
    Recipe("ascwfbp", "ascwfbp", label="ASC-WFBP (gradients per layer, as ready)"),
    Recipe("flsgd", "flsgd", label="FLSGD (local SGD, blocking average every H)"),
    Recipe("plsgd_enp", "plsgd_enp", label="PLSGD-ENP"),
    Recipe("streaming_diloco_blocking", "streaming_diloco", {"tau": 0}, "Streaming DiLoCo (tau 0)", 3),
    Recipe("streaming_diloco", "streaming_diloco", {"tau": 1}, "Streaming DiLoCo (tau 1)", 3),
    Recipe("streaming_diloco_fp4", "streaming_diloco", {"tau": 1, "compress": "e3m0"},
           "Streaming DiLoCo (tau 1, 4-bit E3M0)", 3),
    Recipe("dreamddp", "dreamddp", label="DreamDDP"),
    Recipe("dreamddp_q4", "dreamddp", {"compress": "quant", "compress_bits": 4}, "DreamDDP (4-bit quant)"),
)}


def conf_recipes() -> dict[str, Recipe]:
    """The recipes of conf/algo (a yaml with ``recipe:``), as ``algo=<recipe>`` runs them (H: the planner's)."""
    import yaml

    from dreamddp.config import conf_dir

    out = {}
    for path in sorted(Path(conf_dir(), "algo").glob("*.yaml")):
        values = yaml.safe_load(path.read_text())
        if not values.get("recipe"):
            continue
        options = {k: v for k, v in values.items() if k not in ("defaults", "name", "H", "recipe")}
        out[values["recipe"]] = Recipe(values["recipe"], values["name"], options, f"{values['recipe']} (conf/algo)")
    return out


RECIPES.update(conf_recipes())
DEFAULT_RECIPES = ("ssgd", "ascwfbp", "flsgd", "diloco", "plsgd_enp", "streaming_diloco", "streaming_diloco_fp4",
                   "dreamddp", "dreamddp_q4")


def blocks(model: Model) -> int:
    """The model's repeated blocks, as Streaming DiLoCo's fragments count them."""
    from dreamddp.algorithms.fragments import unit_blocks

    return max(unit_blocks(list(reversed(model.units)))) + 1


@dataclass(frozen=True)
class Prediction:
    recipe: str
    gbps: float
    iteration_s: float
    wait_s: float
    compute_s: float
    utilization: float
    wire_bytes: float  # per worker per iteration, across replicas (planner/link.py)


class Planner:
    """The units of one model on one cluster shape, ready to time any recipe at any slow-link
    rate (the rate is the only thing ``at`` changes)."""

    def __init__(self, model: Model, cluster: Cluster, H: int, fragment_layers: int | None = None):
        if not isinstance(H, int) or H < 1:
            raise ConfigError(f"--H={H}: must be an integer >= 1")
        self.model, self.cluster, self.H, self.fragment_layers = model, cluster, H, fragment_layers
        names = tuple(reversed(model.units))  # backward order
        self.nbytes = tuple(int(round(p * model.bytes_per_param)) for p in reversed(model.params))
        self.layout = UnitLayout(names, self.nbytes, frozenset(names), cluster.workers)
        pace = cluster.pace
        fwd = np.array(model.fwd[::-1], dtype=float) / pace
        bp = np.array(model.bp[::-1], dtype=float) / pace
        total = float(sum(self.nbytes)) or 1.0
        self.compute = Compute(fwd=fwd, bp=bp, step=model.optimizer_s, fwd_rest=model.fwd_rest / pace,
                               optimizer=model.optimizer_s, share=np.array(self.nbytes, dtype=float) / total)
        self.compute_s = float(model.fwd_rest / pace + fwd.sum() + bp.sum() + model.optimizer_s)

    def profile(self, link: HierLink) -> Profile:
        """The profile a set-up plans with: measured compute, each unit's all-reduce on ``link``."""
        fwd_order = list(self.model.units)
        back = dict(zip(self.layout.names, range(len(self.layout))))
        n = self.cluster.workers
        return Profile(units=list(self.layout.names),
                       bp={u: float(self.compute.bp[back[u]]) for u in fwd_order},
                       comm={u: link.seconds("all_reduce", self.nbytes[back[u]], n) if self.nbytes[back[u]] else 0.0
                             for u in fwd_order},
                       fwd={u: float(self.compute.fwd[back[u]]) for u in fwd_order},
                       nbytes={u: self.nbytes[back[u]] for u in fwd_order},
                       step_time=self.model.optimizer_s, meta={"world": n})

    def bound(self, recipe: Recipe, link: HierLink):
        cfg = recipe.config(self.model, self.H, self.fragment_layers)
        cls = ALGORITHMS.lookup(cfg.name)
        if cls.syncs_itself:
            raise ConfigError(f"recipe {recipe.name}: algo={cfg.name} syncs by itself; it has no plan to time")
        setup = cls.setup_from_profile(cfg, self.profile(link), link.alpha_s)
        algo = build_algorithm(cfg, setup)
        algo.bind_plan(self.layout)
        return cfg, cls, algo

    def predict(self, recipe: Recipe | str, gbps: float | None = None) -> Prediction:
        recipe = RECIPES[recipe] if isinstance(recipe, str) else recipe
        cluster = self.cluster if gbps is None else self.cluster.at(gbps)
        link = HierLink(cluster)
        cfg, cls, algo = self.bound(recipe, link)
        layout, n = self.layout, cluster.workers

        def duration(op) -> float:
            nbytes = layout.op_bytes(op)
            return 0.0 if nbytes == 0 or n < 2 else link.seconds(op.collective, int(nbytes * op.scale), n)

        # A plan that is the same every iteration (S-SGD, ASC-WFBP) is timed over one window of
        # one iteration: the same number as over H, without H times the work
        policy = cls.window_policy(cfg)
        window = None if policy is None else policy.takes
        first = algo.plan(0)
        H = 1 if window is None and all(algo.plan(t) == first for t in range(1, self.H)) else self.H
        r = simulate_plan(algo.plan, self.compute, duration, H=H, world=n, window=window)
        sent = sum(link.slow_bytes(op.collective, layout.op_bytes(op) * op.scale)
                   for t in range(self.H) for op in algo.plan(t)) / self.H
        util = min(1.0, self.compute_s / r.mean_iter) if r.mean_iter > 0 else 1.0
        return Prediction(recipe.name, cluster.slow.gbps, r.mean_iter, r.mean_wait, self.compute_s, util, sent)

    def utilization(self, recipe: Recipe | str, gbps: float) -> float:
        return self.predict(recipe, gbps).utilization

    def needed_gbps(self, recipe: Recipe | str, target: float, lo: float = 1e-4, hi: float = 1e6,
                    rtol: float = 1e-4) -> float:
        """The least slow-link rate (Gbit/s) at which the utilization reaches ``target``: bisection
        on log(rate) (utilization grows with the rate); ``inf`` where even ``hi`` falls short (a
        latency or alpha bound), ``lo`` where ``lo`` already reaches it."""
        if not 0 < target <= 1:
            raise ConfigError(f"--targets: {target} is not a utilization in (0, 1]")
        if self.utilization(recipe, hi) < target:
            return math.inf
        if self.utilization(recipe, lo) >= target:
            return lo
        while hi / lo > 1 + rtol:
            mid = math.sqrt(lo * hi)
            if self.utilization(recipe, mid) >= target:
                hi = mid
            else:
                lo = mid
        return hi
