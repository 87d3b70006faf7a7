"""Predicted iteration times: an algorithm's own simulator plan, timed on a profile.

The bridge between the registry (each algorithm's ``simulation``) and the
planning library's simulator: by algorithm name and options (``simulate``),
for a recorded run (``simulate_record``: the algorithm settings and the unit
groups the run itself recorded, so the model simulates what ran), and for
every algorithm at once (``iteration_time_table``).  Like the planning
library it never imports torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields

from dreamddp.algorithms import ALGORITHMS, Algorithm, algo_config
from dreamddp.comm.cost import LinkModel
from dreamddp.schedule.authors_model import modelled_times
from dreamddp.schedule.profile import Profile
from dreamddp.schedule.simulator import SimContext, SimResult, run_plans


def _config(algo, H: int | None, options: dict):
    if not isinstance(algo, str):
        return algo
    cls = ALGORITHMS.lookup(algo)
    known = {f.name for f in fields(cls.Config)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"algo={algo}: no option {unknown[0]!r} (it has {', '.join(sorted(known - {'name'}))})")
    return cls.Config(name=algo, **({} if H is None else {"H": H}), **options)


def simulate(algo, profile: Profile, *, H: int | None = None, schedule: dict[str, list[int]] | None = None,
             runs: list[list[tuple[int, int]]] | None = None, world: int = 2, link: LinkModel | None = None,
             iterations: int | None = None, **options) -> SimResult:
    """Mean iteration time and exposed wait of ``algo`` (a name, or its Config) over
    ``iterations`` (default: one H-window); ``options`` are its ``algo.*`` fields."""
    cfg = _config(algo, H, options)
    cls = ALGORITHMS.lookup(cfg.name)
    cls.check(cfg)
    if not isinstance(world, int) or world < 1:
        raise ValueError(f"world must be an integer >= 1, got {world!r}")
    if not profile.units:
        raise ValueError("profile has no units")
    plan = cls.simulation(SimContext(profile, cfg, world, link, schedule, runs))
    if plan is None:
        raise ValueError(f"algo={cfg.name}: has no simulator plan")
    return run_plans(plan, profile, int(cfg.H), iterations)


def record_link(record: Mapping, gbps: float | None = None) -> LinkModel | None:
    """The modelled link a run record describes (its measured alpha included), at ``gbps``
    (default: the record's own rate; None when the run had none: measured times)."""
    link = record["extra"]["link"]
    gbps = gbps if gbps is not None else link.get("gbps")
    if gbps is None:
        return None
    bw = record["config"]["bandwidth"]
    return LinkModel(gbps, bw["latency_ms"] / 1e3, bw["calibration"], (link.get("alpha_ms") or 0.0) / 1e3)


def simulate_record(profile: Profile, config: Mapping, *, world: int, link: LinkModel | None,
                    groups: list[list[int]] | None = None, runs: list[list[list[int]]] | None = None) -> SimResult:
    """One H-window of a run as it was configured (a run record's ``config``) on ``link``
    (None: the profile's measured comm times; ``record_link`` builds one from the record).

    ``groups`` is the engine's own per-iteration unit assignment (indices into
    ``profile.units``, as a partial-sync algorithm's ``describe()`` records it),
    ``runs`` its collectives when they are not one per unit.
    """
    cfg = algo_config(config["algo"])
    schedule = None
    if groups is not None:
        schedule = {u: [t for t, g in enumerate(groups) if i in g] for i, u in enumerate(profile.units)}
    runs = None if runs is None else [[tuple(r) for r in its] for its in runs]
    return simulate(cfg, profile, schedule=schedule, runs=runs, world=world, link=link, iterations=cfg.H)


def simulated_algorithms() -> list[str]:
    """Registered algorithms with a simulator plan, in display order."""
    simulated = [cls for cls in ALGORITHMS.values() if cls.simulation.__func__ is not Algorithm.simulation.__func__]
    return [cls.name for cls in sorted(simulated, key=lambda c: c.display.order)]


def iteration_time_table(profile: Profile, H: int = 10, model: str = "simulator") -> list[dict]:
    """Rows (algorithm, mean iteration s, mean exposed wait s) for every algorithm.

    ``model="simulator"``: our engine (forward and step included, real overlap);
    ``model="authors"``: the authors' formulas (wait column empty), each row
    named as the algorithm whose display metadata carries the authors' key.
    """
    if model == "authors":
        ours = {cls.display.authors_key: name for name, cls in ALGORITHMS.items() if cls.display.authors_key}
        m = modelled_times(profile, H)
        return [{"algorithm": ours[k], "iteration_s": v, "wait_s": None} for k, v in m["algorithm_times"].items()]
    if model != "simulator":
        raise ValueError(f"model: unknown {model!r} (expected simulator or authors)")
    rows = []
    for name in simulated_algorithms():
        r = simulate(name, profile, H=H)
        rows.append({"algorithm": name, "iteration_s": r.mean_iter, "wait_s": r.mean_wait})
    return rows
