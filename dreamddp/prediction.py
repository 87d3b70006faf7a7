"""Predicted iteration times: an algorithm's own plan, timed on a profile.

The bridge between the registry and the simulator (schedule/simulator.py):
the algorithm is built as the trainer builds it (its set-up made from the
profile as its warm-up would make it, e.g. DreamDDP's schedule), bound to a
torch-free layout of the profile's units, and its ``plan(t)`` is timed.  By
algorithm name and options (``simulate``), for a recorded run
(``simulate_record``: the algorithm settings and the unit groups the run
itself recorded, so the model simulates what ran), and for every algorithm
at once (``iteration_time_table``).  Like the planning library it never
imports torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields, replace

import numpy as np

from dreamddp.algorithms import ALGORITHMS, Algorithm, algo_config
from dreamddp.comm.carry import Slot, carried
from dreamddp.comm.cost import QUEUED, LinkModel, RealTransfer, ring_factor, timed_link
from dreamddp.engine.layout import UnitLayout
from dreamddp.engine.plan import SyncOp
from dreamddp.schedule.authors_model import modelled_times
from dreamddp.schedule.cost import step_shares
from dreamddp.schedule.profile import Profile
from dreamddp.schedule.schedule_file import runs_as_names
from dreamddp.schedule.compute import Compute, Interleaving, Skew
from dreamddp.schedule.simulator import SimResult, simulate_plan
from dreamddp.speed import Speeds

# Unknown bytes (an authors' profile without a link rate): every unit with parameters is
# as big as a bucket can be, so bucketed algorithms send one collective per unit.
_UNKNOWN_BYTES = 2**50


def layout_of(profile: Profile, world: int, grad_clip: float = 0.0) -> UnitLayout:
    """The profile's units as an algorithm binds to them (``grad_clip``: the run's
    train.grad_clip).  Bytes: the profile's, else estimated from each unit's measured
    all-reduce seconds at the profile's link rate."""
    units = profile.units
    if profile.nbytes:
        missing = [u for u in units if u not in profile.nbytes]
        if missing:
            raise ValueError(f"profile nbytes lacks {len(missing)} unit(s), first {missing[0]!r}")
        nbytes = [int(profile.nbytes[u]) for u in units]
    else:
        gbps, at = profile.meta.get("gbps"), int(profile.meta.get("world") or world)
        comm = [profile.comm.get(u, 0.0) for u in units]
        if gbps and at > 1:
            per_s = gbps * 1e9 / 8 / ring_factor("all_reduce", at)
            nbytes = [max(1, int(c * per_s)) if c > 0 else 0 for c in comm]
        else:
            nbytes = [_UNKNOWN_BYTES if c > 0 else 0 for c in comm]
    return UnitLayout(tuple(units), tuple(nbytes), frozenset(units), world, grad_clip=grad_clip)


def compute_of(profile: Profile) -> Compute:
    """Per-unit forward and backward seconds; forward outside the units runs first.  The
    optimizer step's share per unit: its bytes' (an element-wise optimizer's work), else
    equal over the units that sync."""
    fwd = np.array([profile.fwd.get(u, 0.0) for u in profile.units], dtype=float)
    bp = np.array([profile.bp.get(u, 0.0) for u in profile.units], dtype=float)
    rest = max(0.0, float(sum(profile.fwd.values())) - float(fwd.sum()))
    share = step_shares(profile)
    return Compute(fwd=fwd, bp=bp, step=profile.step_time, fwd_rest=rest, optimizer=profile.optimizer_seconds,
                   share=share, step_call=profile.optimizer_call_time or 0.0)


def op_seconds(profile: Profile, layout: UnitLayout, link: LinkModel | None):
    """``op -> seconds`` on the link: the link model on the op's bytes (one alpha per
    collective), or, with ``link=None``, the profile's measured per-unit all-reduce times
    (they embody the world size and rate they were measured at), rescaled to the op's
    collective and payload."""
    comm = np.array([profile.comm.get(u, 0.0) for u in profile.units], dtype=float)
    world = layout.world

    def seconds(op: SyncOp) -> float:
        units = op.units
        nbytes = layout.op_bytes(op)
        if nbytes == 0 or world < 2:
            return 0.0
        if link is not None:
            return link.seconds(op.collective, int(nbytes * op.scale), world)
        measured = float(comm[units].sum())
        if op.part[1] > 1:  # a part: its share of the run's bytes
            measured *= nbytes / layout.run_bytes(op.first, op.last)
        return measured * op.scale * ring_factor(op.collective, world) / ring_factor("all_reduce", world)

    return seconds


def codec_host_of(algo: Algorithm, layout: UnitLayout, timed: list[tuple[int, float, float]]):
    """``op -> (launch s, completion s)`` of the codec's host work on each op the pipeline
    compresses (0 on the others): linear in the payload's elements through the two sizes it was
    timed at (``timed``: (elements, launch s, completion s)), never below 0."""
    (n0, l0, c0), (n1, l1, c1) = timed[0], timed[-1]
    line = lambda a, b, n: max(0.0, a + (b - a) * (n - n0) / (n1 - n0)) if n1 != n0 else a  # noqa: E731
    cache: dict[SyncOp, tuple[float, float]] = {}

    def seconds(op: SyncOp) -> tuple[float, float]:
        if op not in cache:
            n = algo.sync.compressed_numel(op)
            cache[op] = (line(l0, l1, n), line(c0, c1, n)) if n else (0.0, 0.0)
        return cache[op]

    return seconds


def carried_seconds(algo: Algorithm, layout: UnitLayout, real: RealTransfer):
    """The simulator's deferred carrier: the real collectives a wait starts for the queued ops,
    grouped as the engine's carrier groups them (comm/carry.py, on where the algorithm puts
    each payload), each taking the real backend's time for its bytes."""

    def carry(queued: list[tuple[int, SyncOp]]) -> list[tuple[list[int], float]]:
        slots = [Slot(op.collective, *algo.payload_place(op, t, layout), int(layout.op_bytes(op) * op.scale))
                 for t, op in queued]
        return [([i for run in r.runs for i in run],
                 real.seconds(slots[r.runs[0][0]].kind, r.nbytes(slots), layout.world)) for r in carried(slots)]

    return carry


def planning_profile(profile: Profile, layout: UnitLayout, link: LinkModel | None) -> Profile:
    """The profile a scheduler plans with: each unit's all-reduce seconds as the link takes them."""
    if link is None:
        return profile
    comm = {u: link.seconds("all_reduce", b, layout.world) if b else 0.0 for u, b in zip(layout.names, layout.nbytes)}
    return replace(profile, comm=comm)


def skew_of(by_rank: list[list[float]] | None, profile: Profile, seed: int = 0) -> Skew | None:
    """The ranks' compute spread as the simulator samples it: each rank's measured compute
    seconds per pass or iteration (``by_rank``) over the profile's iteration compute."""
    return Skew.of(by_rank, sum(profile.fwd.values()) + sum(profile.bp.values()) + profile.step_time, seed)


def _config(algo, H: int | None, options: dict):
    if not isinstance(algo, str):
        return algo
    cls = ALGORITHMS.lookup(algo)
    known = {f.name for f in fields(cls.Config)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"algo={algo}: no option {unknown[0]!r} (it has {', '.join(sorted(known - {'name'}))})")
    return cls.Config(name=algo, **({} if H is None else {"H": H}), **options)


def bind_to_profile(cfg, profile: Profile, layout: UnitLayout, link: LinkModel | None,
                    schedule: dict[str, list[int]] | None = None,
                    runs: list[list[tuple[int, int]]] | None = None,
                    delayed: list[list[tuple[int, int]]] | None = None) -> Algorithm:
    """The algorithm ``cfg`` names, set up from ``profile`` (or the given ``schedule``, its
    collectives ``runs`` and its late ones ``delayed``, unit indices) and bound to ``layout``:
    the plan the trainer would run."""
    cls = ALGORITHMS.lookup(cfg.name)
    if schedule is not None:
        if not cls.scheduled:
            raise ValueError(f"algo={cfg.name}: takes no schedule")
        setup = cls.setup_from_schedule(int(cfg.H), schedule, runs_as_names(runs, layout.names),
                                        runs_as_names(delayed, layout.names))
    else:
        alpha = link.alpha_s if link is not None else 0.0
        setup = cls.setup_from_profile(cfg, planning_profile(profile, layout, link), alpha)
    algo = cls.build(cfg, setup)
    algo.bind_plan(layout)
    return algo


def simulate(algo, profile: Profile, *, H: int | None = None, schedule: dict[str, list[int]] | None = None,
             runs: list[list[tuple[int, int]]] | None = None, delayed: list[list[tuple[int, int]]] | None = None,
             world: int = 2, link: LinkModel | None = None, iterations: int | None = None,
             skew: Skew | None = None, carrier: RealTransfer | None = None, carrier_at_step: bool = False,
             grad_clip: float = 0.0, host: tuple[float, float] | None = None,
             interleaving: Interleaving | None = None, speeds: Speeds | None = None,
             codec_host: list[tuple[int, float, float]] | None = None, **options) -> SimResult:
    """Mean iteration time and exposed wait of ``algo`` (a name, or its Config) over
    ``iterations`` (default: one H-window); ``options`` are its ``algo.*`` fields.
    ``carrier``: the real backend's transfer, for a run whose deferred carrier starts it at
    the first wait (None: the link's times only); ``carrier_at_step``: and at each iteration's end
    (the step carrier); ``grad_clip``: the trainer's train.grad_clip (a plan may sync for it);
    ``host``: the engine's host seconds per op, (launching, completing) (Compute.launch_host);
    ``interleaving``: the run trained in turns with others (simulate_plan); ``speeds``: each rank's
    compute speed per iteration (unequal workers; simulate_plan); ``codec_host``: the codec's host
    seconds at launch and completion by payload elements (dreamddp.warmup.codec_host), charged to
    each compressed op."""
    cfg = _config(algo, H, options)
    cls = ALGORITHMS.lookup(cfg.name)
    cls.check(cfg)
    if cls.syncs_itself:
        raise ValueError(f"algo={cfg.name}: syncs by itself, outside any plan; it is not simulated")
    if not isinstance(world, int) or world < 1:
        raise ValueError(f"world must be an integer >= 1, got {world!r}")
    if not profile.units:
        raise ValueError("profile has no units")
    if link is not None and not profile.nbytes:
        raise ValueError("profile has no nbytes: a modelled link needs per-unit bytes; use measured comm times")
    layout = layout_of(profile, world, grad_clip)
    bound = bind_to_profile(cfg, profile, layout, link, schedule, runs, delayed)
    real = None if carrier is None else carried_seconds(bound, layout, carrier)
    compute = compute_of(profile)
    if host is not None:
        compute = replace(compute, launch_host=host[0], complete_host=host[1])
    if codec_host:
        compute = replace(compute, op_host=codec_host_of(bound, layout, codec_host))
    return simulate_plan(bound.plan, compute, op_seconds(profile, layout, link), H=int(cfg.H),
                         iterations=iterations, skew=skew, world=world, carrier=real,
                         carrier_at_step=carrier_at_step, interleaving=interleaving, speeds=speeds, window=_rule(cls, cfg))


def record_link(record: Mapping, gbps: float | None = None) -> LinkModel | None:
    """The modelled link a run record describes (its measured alpha included), at ``gbps``
    (default: the record's own rate, and a tc link's own start-up timings where it has them;
    None when the run had no rate: measured times)."""
    link = record["extra"]["link"]
    uplinks = link.get("worker_gbps")  # a ring goes at the slowest uplink's pace
    timed = link.get("link_transfer_ms") if gbps is None else None  # a tc link's, at its own rate only
    gbps = gbps if gbps is not None else (min(uplinks) if uplinks else link.get("gbps"))
    if gbps is None:
        return None
    bw = record["config"]["bandwidth"]
    alpha_s = (link.get("alpha_ms") or 0.0) / 1e3
    measured = timed_link(alpha_s, {k: [(b, ms / 1e3) for b, ms in v] for k, v in timed.items()}) if timed else None
    return LinkModel(gbps, bw["latency_ms"] / 1e3, bw["calibration"], alpha_s, measured)


def record_carrier(record: Mapping) -> RealTransfer | None:
    """The real transfer a run's waits exposed: its deferred (or step) carrier's, as measured at
    its start-up (None for an eager carrier, or a record made before the probe; records made
    before the other kinds were probed: theirs scaled from the all-reduce's)."""
    link = record["extra"]["link"]
    probed = link.get("real_transfer_ms")
    if link.get("carrier") not in QUEUED or not probed:
        return None
    seconds = lambda pairs: [(b, ms / 1e3) for b, ms in pairs]  # noqa: E731
    kinds = {k: seconds(v) for k, v in (link.get("real_transfer_kinds_ms") or {}).items()}
    return RealTransfer.probed((link.get("alpha_ms") or 0.0) / 1e3, seconds(probed), kinds)


def simulate_record(profile: Profile, config: Mapping, *, world: int, link: LinkModel | None,
                    plan: Mapping | None = None, skew: Skew | None = None, carrier: RealTransfer | None = None,
                    carrier_at_step: bool = False, iterations: int | None = None,
                    host: tuple[float, float] | None = None,
                    interleaving: Interleaving | None = None,
                    codec_host: list[tuple[int, float, float]] | None = None) -> SimResult:
    """Iterations of a run as it was configured (a run record's ``config``) on ``link``
    (None: the profile's measured comm times; ``record_link`` builds one from the record).

    ``plan``: the run's own plan as its algorithm described it (the record's
    ``extra.algorithm``): a scheduled algorithm's per-iteration unit ``groups``
    (indices into ``profile.units``), its collectives ``runs`` when they are not
    one per unit, and its late ones ``delayed``; the simulator then times what ran.
    ``host``: the engine's host seconds per op, ``interleaving`` the turns the run was trained in
    with others, ``codec_host`` its codec's timed host work (``simulate``).
    """
    cfg = algo_config(config["algo"])
    plan = plan or {}
    schedule = runs = delayed = None
    if plan.get("groups") is not None and ALGORITHMS.lookup(cfg.name).scheduled:
        groups = plan["groups"]
        schedule = {u: [t for t, g in enumerate(groups) if i in g] for i, u in enumerate(profile.units)}
        as_runs = lambda rs: None if rs is None else [[tuple(r) for r in its] for its in rs]  # noqa: E731
        runs, delayed = as_runs(plan.get("runs")), as_runs(plan.get("delayed"))
    return simulate(cfg, profile, schedule=schedule, runs=runs, delayed=delayed, world=world, link=link,
                    iterations=iterations or cfg.H, skew=skew, carrier=carrier, carrier_at_step=carrier_at_step,
                    grad_clip=float((config.get("train") or {}).get("grad_clip") or 0.0), host=host, interleaving=interleaving,
                    speeds=Speeds.from_config(config.get("cluster") or {}), codec_host=codec_host)


def simulated_algorithms(profile_only: bool = False) -> list[str]:
    """Registered algorithms the simulator can time, in display order; ``profile_only``: less
    those whose steps follow a wall-clock window (flsgd_timed), whose time a profile alone does
    not fix (the every-algorithm tables)."""
    classes = sorted(ALGORITHMS.values(), key=lambda c: c.display.order)
    return [cls.name for cls in classes if not cls.syncs_itself
            and not (profile_only and cls.window_policy(cls.Config()) is not None)]


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
    for name in simulated_algorithms(profile_only=True):
        r = simulate(name, profile, H=H)
        rows.append({"algorithm": name, "iteration_s": r.mean_iter, "wait_s": r.mean_wait})
    return rows


def _rule(cls, cfg):
    """The algorithm's wall-clock window rule for the simulator (None: every iteration)."""
    window = cls.window_policy(cfg)
    return None if window is None else window.takes
