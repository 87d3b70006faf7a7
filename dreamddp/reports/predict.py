"""What the benchmark reports predict and bound, from one job's run records.

DreamDDP's start-up profile gives each unit's share of forward and backward; the job's two
compute-only runs (``nosync``: the engine with nothing to sync, ``plain``: no engine; both on the
ideal link), pooled, give the compute totals and every rank's skew; each run's own record gives its
link and plan, and nothing else.  Both compute-only runs because one run's compute drifts with the
host (nosync's backward once ran 10.8% over plain's in the same processes) while the engine's cost
between them is within that noise: the mean of two interleaved samples halves the variance.

``predict``: the simulator with that skew, the real transfer the run's carrier exposes and the
engine's host work per op; ``plan_bound``: the run's own plan with no skew; ``structure_bound``:
the least iteration any plan of the algorithm's kind could take on this profile and link.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path

import numpy as np

from dreamddp.algorithms import ALGORITHMS
from dreamddp.engine.plan import When
from dreamddp.prediction import compute_of, simulate_record, skew_of
from dreamddp.reports.records import RankCompute, Record, Row
from dreamddp.schedule.cost import arrays, overlap_terms
from dreamddp.schedule.delay import late_room
from dreamddp.schedule.general import hiding_bound
from dreamddp.schedule.optimal import optimal_cuts
from dreamddp.schedule.profile import Profile, load_profile, scaled
from dreamddp.schedule.compute import Interleaving

REFERENCE = "dreamddp"  # the segment whose start-up profile gives the per-unit shares
NOSYNC = "nosync@ideal"
COMPUTE_ONLY = (NOSYNC, "plain@ideal")  # the segments whose steady state, pooled, gives compute and skew
WINDOWS = 20  # windows the skewed prediction averages over
LAUNCHED_IN = {"backward": When.UNIT_READY, "forward": When.BEFORE_FORWARD}  # the hooks a phase runs
CONTIGUOUS = ("dreamddp", "optimal")  # schedulers whose plans sync one contiguous run of units per iteration

def reference_rows(segs: dict, labels: tuple[str, ...] = COMPUTE_ONLY) -> list[Row]:
    """The timed iterations of the job's compute-only runs (``labels``), pooled."""
    return [r for label in labels if label in segs for r in segs[label].timed()]


def reference_mean(segs: dict, field: str, labels: tuple[str, ...] = COMPUTE_ONLY) -> float:
    return statistics.fmean(getattr(r, field) for r in reference_rows(segs, labels))


def host_charged(rec: Record, profile: Profile | None, phases: tuple[str, ...]) -> float:
    """Seconds per iteration of engine host work the predictions charge inside ``phases``: the
    plan's launches there, each at ``engine_host``'s cost (not compute, though a phase's time holds it)."""
    host = engine_host(rec)
    if profile is None or host is None:
        return 0.0
    iterations, points = plan_run(rec, profile).ops, {LAUNCHED_IN[p] for p in phases}
    return host[0] * sum(op.launch in points for ops in iterations for op in ops) / max(1, len(iterations))


def forward_steps(rec: Record, profile: Profile | None) -> tuple[float, float] | None:
    """(measured, charged) seconds per iteration of optimizer steps applied in forward where
    collectives completed (SyncOp.steps); None where the records lack them or none ran."""
    rows = rec.timed()
    if profile is None or not rows or rows[0].forward_steps is None:
        return None
    measured = statistics.fmean(r.forward_steps for r in rows)
    if measured <= 0:
        return None
    compute, iterations = compute_of(profile), plan_run(rec, profile).ops
    return measured, sum(compute.stepped(op) for ops in iterations for op in ops) / max(1, len(iterations))


def backward_over_reference(rec: Record, segs: dict, profile: Profile | None = None) -> float:
    """The run's backward less charged host work over the compute-only runs': no wait falls in
    backward, so this says whether the run computed slower than the predictions charge."""
    backward = rec.timed_mean("backward") - host_charged(rec, profile, ("backward",))
    return backward / reference_mean(segs, "backward")


def forward_over_reference(rec: Record, segs: dict) -> float:
    return rec.timed_mean("forward") / reference_mean(segs, "forward")


def waits_in_forward(rec: Record) -> bool:
    """Whether the plan completes collectives before a unit's forward (DeAR, overlap_forward)."""
    return bool(rec.option("overlap_forward")) or ALGORITHMS.lookup(rec.algo).uses_forward_hooks


def compute_phases(rec: Record) -> tuple[str, ...]:
    """The run's phases that are compute alone: backward, and forward where no wait falls in it."""
    return ("backward",) if waits_in_forward(rec) else ("forward", "backward")


def compute_excess(rec: Record, segs: dict, profile: Profile | None = None) -> float:
    """Seconds per iteration the run computed beyond the compute-only runs over its
    ``compute_phases``, less the host work charged there (negative: faster)."""
    phases = compute_phases(rec)
    measured = sum(rec.timed_mean(f) - reference_mean(segs, f) for f in phases)
    return measured - host_charged(rec, profile, phases)


def steady_profile(segs: dict, labels: tuple[str, ...] = COMPUTE_ONLY) -> Profile | None:
    """DreamDDP's profile scaled to the compute-only runs' steady forward, backward and rest; the
    optimizer step alone stays the profiler's (what a plan that steps in forward moves)."""
    if REFERENCE not in segs or NOSYNC not in segs:
        return None
    profile = load_profile(Path(segs[REFERENCE].path) / "profile")
    rows = reference_rows(segs, labels)
    fwd, bwd = (statistics.fmean(getattr(r, f) for r in rows) for f in ("forward", "backward"))
    rest = statistics.fmean(r.rest for r in rows)
    fs, bs = fwd / sum(profile.fwd.values()), bwd / sum(profile.bp.values())
    return replace(profile, fwd={u: v * fs for u, v in profile.fwd.items()},
                   bp={u: v * bs for u, v in profile.bp.items()}, step_time=rest,
                   optimizer_time=profile.optimizer_seconds)


def own_compute(rec: Record, profile: Profile) -> Profile:
    """``profile`` scaled to the run's own compute (iteration less waits): a diagnostic that
    leaves only the communication model's error."""
    k = statistics.fmean(r.time - r.wait for r in rec.timed()) / compute_time(profile)
    optimizer = None if profile.optimizer_time is None else profile.optimizer_time * k
    return replace(scaled(profile, bp=k), step_time=profile.step_time * k, optimizer_time=optimizer)


def _compute_by_rank(segs: dict, labels: tuple[str, ...]) -> tuple[list[list[RankCompute]], bool]:
    """Each ``labels`` run's ranks' compute, and whether every rank kept its series."""
    runs = [segs[label].compute_by_rank for label in labels if label in segs]
    return runs, all(r.series is not None for run in runs for r in run)


def reference_skew(segs: dict, profile: Profile, seed: int = 0, labels: tuple[str, ...] = COMPUTE_ONLY,
                   together: bool = True):
    """Every rank's compute per iteration in the compute-only runs.  ``together`` (where records keep
    series): every rank drawn from the same iteration, since a slow spell of the host slows them all;
    else each rank's quantiles drawn on its own.  The Skew's ``joint`` says which."""
    runs, series = _compute_by_rank(segs, labels)
    ranks = min((len(r) for r in runs), default=0)
    if ranks < 2:
        return None
    if together and series:
        by_rank = [[x for r in runs for x in r[i].series] for i in range(ranks)]
        return replace(skew_of(by_rank, profile, seed), joint=True)
    return skew_of([[q for r in runs for q in r[i].quantiles] for i in range(ranks)], profile, seed)


def rank_correlation(segs: dict, labels: tuple[str, ...] = COMPUTE_ONLY) -> float | None:
    """Mean Pearson correlation over pairs of ranks of their compute series, each run centred on its means."""
    runs, series = _compute_by_rank(segs, labels)
    if not runs or min(len(r) for r in runs) < 2 or not series:
        return None
    centred = [x - x.mean(axis=1, keepdims=True) for x in (np.array([r.series for r in run], dtype=float)
                                                            for run in runs)]
    a = np.concatenate(centred, axis=1)
    return float(np.mean(np.corrcoef(a)[np.triu_indices(len(a), 1)]))


def engine_host(rec: Record) -> tuple[float, float] | None:
    """The engine's host seconds per op (launching, completing) over the untimed first iterations;
    None for older records, runs that launched nothing then, and CUDA runs (host work runs ahead)."""
    if rec.device == "cuda" or (rec.device == "auto" and rec.gpus):
        return None
    host = [r.host for r in rec.warmup()]
    if not host or host[0] is None:
        return None
    launch, ops, complete, completed = (sum(h[i] for h in host) for i in range(4))
    return (launch / ops, complete / max(1, completed)) if ops else None


def turn(rec: Record) -> int | None:
    """Iterations per turn of the interleaved job, each starting at a barrier (bench/worker.py)."""
    chunk = rec.job_chunk()
    return None if chunk is None else chunk or int(rec.option("H"))


def _simulate(rec: Record, profile: Profile, skew, windows: int, real: bool, host: bool):
    return simulate_record(profile, rec.config, world=rec.replicas, link=rec.link_model(), plan=rec.plan, skew=skew,
                           carrier=rec.real_transfer() if real else None, carrier_at_step=rec.carrier == "step",
                           iterations=windows * int(rec.option("H")), host=engine_host(rec) if host else None,
                           interleaving=None if turn(rec) is None else Interleaving(turn(rec)))


def predict(rec: Record, profile: Profile, skew, host: bool = True) -> float:
    """``host=False``: without the engine's host work per op (a counterfactual)."""
    return _simulate(rec, profile, skew, WINDOWS, real=True, host=host).mean_iter


def plan_run(rec: Record, profile: Profile, real: bool = False, host: bool = False):
    """The run's own plan with no skew over one window; bounds leave host work out unless ``host``."""
    return _simulate(rec, profile, None, 1, real, host)


def plan_bound(rec: Record, profile: Profile, real: bool = False, host: bool = False) -> float:
    return plan_run(rec, profile, real, host).mean_iter


def compute_time(profile: Profile) -> float:
    return sum(profile.fwd.values()) + sum(profile.bp.values()) + profile.step_time


def late_parts(rec: Record) -> int:
    """The most parts the plan may cut a late collective into (records before the cut: 1)."""
    return max(1, min(int(rec.option("late_parts") or 1), int(rec.option("H"))))


def structure_bound(rec: Record, profile: Profile, any_assignment: bool = False) -> float:
    """The least iteration of any plan of the algorithm's kind; for the others, their own plan.  DreamDDP:
    contiguous schedulers, the exact optimum over splits (schedule/optimal.py); the general scheduler
    (or ``any_assignment``), each unit's all-reduce overrunning the rest of backward alone on the link;
    a delayed merge, each unit that or what overruns d iterations of compute, at least the window's traffic / H."""
    if rec.algo != "dreamddp":
        return plan_bound(rec, profile)
    link, world, H = rec.link_model(), rec.replicas, int(rec.option("H"))
    bp, _ = arrays(profile)
    comm = np.array([link.seconds("all_reduce", profile.nbytes[u], world) for u in profile.units])
    compute = compute_time(profile)
    fwd = sum(profile.fwd.values())
    ready = fwd + np.cumsum(bp)
    end = np.full(len(bp), fwd + float(bp.sum()))
    slack, moved = overlap_terms(profile, bool(rec.option("overlap_forward")))  # until the unit's next forward
    if slack is not None:
        end = end + slack - moved
    synced = comm > 0
    overrun = np.maximum(0.0, comm - (end - ready))  # in place, alone on the link (hiding_bound's terms)
    delay = int(rec.option("merge_delay") or 0)
    if not delay and rec.option("scheduler", "dreamddp") in CONTIGUOUS and not any_assignment:
        if rec.option("fuse") and slack is None:  # fused runs pay a collective's fixed cost once, not per unit
            fixed = link.seconds("all_reduce", 0, world)
            return compute + optimal_cuts(bp, np.where(comm > 0, comm - fixed, 0.0), H)[0] / H
        return compute + optimal_cuts(bp, comm, H, slack, moved)[0] / H
    if not delay:
        return compute + hiding_bound(ready[synced], comm[synced], end[synced]) / H
    late = np.maximum(0.0, comm / late_parts(rec) - late_room(compute, profile.step_time, delay))
    return max(compute + float(np.minimum(overrun, late)[synced].sum()) / H, float(comm.sum()) / H)
