"""What the benchmark reports predict and bound, from one job's run records.

Everything comes from records of the same job (one process group, one link
rate): the per-unit profile DreamDDP measured at start-up gives each unit's
share of forward and backward; the job's two compute-only runs (``nosync``:
the engine with nothing to sync, ``plain``: no engine; both on the ideal link),
pooled, give the compute totals (forward, backward, the rest of the iteration)
and every rank's spread of compute time (its skew); each run's own record
gives its link (rate, measured alpha) and its own plan (schedule, collectives,
late merges).  The run being predicted contributes nothing else.

Why both compute-only runs: one run's compute drifts with the host (in one
simulator-accuracy job nosync's backward ran 10.8% over plain's, interleaved
in the same processes), and the engine's own cost between the two is within
that noise (nosync / plain, medians: 0.99-1.00 in make bench, 0.97-1.01 in
make bench-skew); the mean of two interleaved samples of the same compute
has half the variance of one.

- ``predict``: the simulator, skew sampled from the compute-only runs' ranks (iteration by
  iteration, as they moved together, where the records hold the series), over many windows,
  with the real transfer the run's deferred carrier exposes at its waits (as its
  start-up probe measured it), and what of it runs on past a wait on the worker's core;
  and the engine's host work per op (launches, completions) as the run's untimed first
  iterations measured it (``engine_host``; CPU runs); every turn of the interleaved job
  (``turn``: its chunk) starting at a barrier, as dreamddp/bench/worker.py runs it;
- ``own_compute``: the profile charged the run's own compute instead (a diagnostic);
- ``plan_bound``: the simulator on this run's own plan with no skew: the
  iteration its plan takes when every rank computes alike, on the modelled link
  alone (``real=True``: with the real transfer as ``predict`` has it);
- ``structure_bound``: the least iteration any plan of the algorithm's kind
  could take on this profile and link (DreamDDP: the least exposed wait any
  plan its scheduler searches could leave: with the paper's scheduler (or
  ``optimal``), one contiguous run of units per iteration, each run's
  all-reduces queued on the link from their gradients until the end of
  backward (or, overlapped, until each unit's next forward), the exact
  optimum over such splits (schedule/optimal.py); with the general scheduler,
  any assignment, each unit's all-reduce at least overrunning what remains of
  backward after its gradient (or the next forward up to the unit) alone on
  the link (``any_assignment`` asks for this one whatever the scheduler, the
  price of contiguity); with a delayed merge, each unit either
  that or, merged late, what overruns d iterations of compute (each of its
  parts, when ``algo.late_parts`` lets the plan cut it), and never less than
  the window's traffic over H); for the others their plan is their structure.
"""

from __future__ import annotations

import json
import os
import statistics
from dataclasses import replace
from pathlib import Path

import numpy as np

from dreamddp.algorithms import ALGORITHMS
from dreamddp.engine.plan import When
from dreamddp.prediction import compute_of, record_carrier, record_link, simulate_record, skew_of
from dreamddp.run.summary import warmup_cut
from dreamddp.schedule.cost import arrays, overlap_terms
from dreamddp.schedule.delay import late_room
from dreamddp.schedule.general import hiding_bound
from dreamddp.schedule.optimal import optimal_cuts
from dreamddp.schedule.profile import Profile, load_profile, scaled
from dreamddp.schedule.simulator import Interleaving

REFERENCE = "dreamddp"  # the segment whose start-up profile gives the per-unit shares
NOSYNC = "nosync@ideal"  # the engine with nothing to sync (its iteration: the compute-only one)
COMPUTE_ONLY = (NOSYNC, "plain@ideal")  # the segments whose steady state, pooled, gives compute and skew
WINDOWS = 20  # windows the skewed prediction averages over


def timed(rec: dict) -> list[dict]:
    rows = rec["iterations"]
    return rows[warmup_cut(len(rows)):]


def mean_iteration(rec: dict) -> float:
    """The run's mean iteration time (its summary's, over its timed iterations)."""
    return rec["summary"]["mean_iteration_time"]


def step_and_rest(row: dict) -> float:
    """One iteration less its waits, forward and backward: the step and the engine's books."""
    return row["time"] - row["wait"] - row["forward"] - row["backward"]


def timed_mean(rec: dict, field: str) -> float:
    """Mean of one per-iteration field (forward, backward, ...) over the run's timed iterations."""
    return statistics.fmean(r[field] for r in timed(rec))


def reference_rows(segs: dict, labels: tuple[str, ...] = COMPUTE_ONLY) -> list[dict]:
    """The timed iterations of the job's compute-only runs, pooled (module docstring); ``labels``:
    which of them (simulator_accuracy shows what nosync alone would predict)."""
    return [r for label in labels if label in segs for r in timed(segs[label])]


def reference_mean(segs: dict, field: str, labels: tuple[str, ...] = COMPUTE_ONLY) -> float:
    """Mean of one per-iteration field over the compute-only runs' timed iterations."""
    return statistics.fmean(r[field] for r in reference_rows(segs, labels))


SLOW = 0.03  # a run's backward this much over the compute-only runs' in the same job: its compute ran slower
LAUNCHED_IN = {"backward": When.UNIT_READY, "forward": When.BEFORE_FORWARD}  # the hooks a phase runs


def host_charged(rec: dict, profile: Profile | None, phases: tuple[str, ...]) -> float:
    """Seconds per iteration of the engine's host work the predictions charge inside ``phases``
    (forward, backward): the run's launches there per iteration, as its plan makes them (gradient-
    ready hooks in backward, forward pre-hooks in forward), each at ``engine_host``'s measured
    cost.  Part of a phase's measured time that is not compute: at a fast link DreamDDP launches
    about 36 collectives in every backward of ResNet-18, 2.0 ms of it (results/simulator_fast).  0 where the
    predictions charge none (no profile to plan on, ``engine_host`` None)."""
    host = engine_host(rec)
    if profile is None or host is None:
        return 0.0
    iterations = plan_run(rec, profile).ops
    points = {LAUNCHED_IN[p] for p in phases}
    launched = sum(op.launch in points for ops in iterations for op in ops)
    return host[0] * launched / max(1, len(iterations))


def forward_steps(rec: dict, profile: Profile | None) -> tuple[float, float] | None:
    """Seconds per iteration of the optimizer steps the run applied where its collectives
    completed, in forward (SyncOp.steps: DeAR's groups, overlap_forward's averages): measured
    (the records' ``forward_steps``, over the timed iterations) and charged (each such op's share
    of the step and its own call, on ``profile``, as the run's plan completes them).  None where
    the records lack the field (made before it was kept) or the run stepped nothing there."""
    rows = timed(rec)
    if profile is None or not rows or "forward_steps" not in rows[0]:
        return None
    measured = statistics.fmean(r["forward_steps"] for r in rows)
    if measured <= 0:
        return None
    compute, iterations = compute_of(profile), plan_run(rec, profile).ops
    return measured, sum(compute.stepped(op) for ops in iterations for op in ops) / max(1, len(iterations))


def backward_over_reference(rec: dict, segs: dict, profile: Profile | None = None) -> float:
    """The run's steady backward, less the host work the predictions charge in it (``profile``:
    the job's, to plan on), over the compute-only runs' in its job.  Backward alone: no wait
    falls inside it (overlap_forward's fall in forward), so it says whether the run computed
    slower than the compute the predictions charge."""
    backward = timed_mean(rec, "backward") - host_charged(rec, profile, ("backward",))
    return backward / reference_mean(segs, "backward")


def forward_over_reference(rec: dict, segs: dict) -> float:
    """The run's steady forward over the compute-only runs'.  Compute alone only where the
    algorithm waits for nothing in forward (overlap_forward's averages and DeAR's all-gathers
    finish there): below 1, the run computed faster than the speed its predictions charge."""
    return timed_mean(rec, "forward") / reference_mean(segs, "forward")


def waits_in_forward(rec: dict) -> bool:
    """Whether the run's waits can fall in its forward pass: a plan that completes collectives
    before a unit's forward (DeAR's all-gathers, overlap_forward's averages)."""
    algo = rec["config"]["algo"]
    return bool(algo.get("overlap_forward")) or ALGORITHMS.lookup(algo["name"]).uses_forward_hooks


def compute_phases(rec: dict) -> tuple[str, ...]:
    """The run's phases that are compute alone: backward, and forward where no wait falls in it."""
    return ("backward",) if waits_in_forward(rec) else ("forward", "backward")


def compute_excess(rec: dict, segs: dict, profile: Profile | None = None) -> float:
    """Seconds per iteration the run computed beyond the compute-only runs' (whose speed the
    predictions charge) over its ``compute_phases``, less the host work the predictions charge
    there (``host_charged``).  Negative where it computed faster."""
    phases = compute_phases(rec)
    measured = sum(timed_mean(rec, f) - reference_mean(segs, f) for f in phases)
    return measured - host_charged(rec, profile, phases)


def steady_profile(segs: dict, labels: tuple[str, ...] = COMPUTE_ONLY) -> Profile | None:
    """DreamDDP's per-unit profile with forward, backward and step set to the compute-only
    runs' steady state (means over their timed iterations).  Of their step and the rest, the
    optimizer step alone is the start-up profile's (the profiler times it on its own): what
    a plan that steps where its collectives complete (DeAR) moves out of the step."""
    if REFERENCE not in segs or NOSYNC not in segs:
        return None
    profile = load_profile(os.path.join(segs[REFERENCE]["_dir"], "profile"))
    rows = reference_rows(segs, labels)
    fwd, bwd = (statistics.fmean(r[f] for r in rows) for f in ("forward", "backward"))
    rest = statistics.fmean(step_and_rest(r) for r in rows)
    fs, bs = fwd / sum(profile.fwd.values()), bwd / sum(profile.bp.values())
    return replace(profile, fwd={u: v * fs for u, v in profile.fwd.items()},
                   bp={u: v * bs for u, v in profile.bp.items()}, step_time=rest,
                   optimizer_time=profile.optimizer_seconds)


def own_compute_time(rec: dict) -> float:
    """The run's own compute per iteration: its iteration less its waits, over its timed iterations."""
    return statistics.fmean(r["time"] - r["wait"] for r in timed(rec))


def own_compute(rec: dict, profile: Profile) -> Profile:
    """``profile`` with every compute time scaled to the run's own: its iteration less its
    waits, over its timed iterations.  A diagnostic, not a prediction: it takes the one thing
    a prediction must not (the run's own compute) to show what is left, the communication
    model's error."""
    k = own_compute_time(rec) / compute_time(profile)
    optimizer = None if profile.optimizer_time is None else profile.optimizer_time * k
    return replace(scaled(profile, bp=k), step_time=profile.step_time * k, optimizer_time=optimizer)


def reference_skew(segs: dict, profile: Profile, seed: int = 0, labels: tuple[str, ...] = COMPUTE_ONLY,
                   together: bool = True):
    """Every rank's compute per iteration in the compute-only runs, both runs' together.
    ``together``: their series, every rank's draw from the same measured iteration (on a shared
    host a slow spell slows every worker: drawn apart it would count as skew); records without
    series (before they were kept) and ``together=False``: each rank's quantiles, drawn on its
    own.  The Skew's ``joint`` says which."""
    runs = _compute_by_rank(segs, labels)
    ranks = min((len(r) for r in runs), default=0)
    if ranks < 2:
        return None
    if together and _have_series(runs):
        by_rank = [[x for r in runs for x in r[i]["series"]] for i in range(ranks)]
        return replace(skew_of(by_rank, profile, seed), joint=True)
    return skew_of([[q for r in runs for q in r[i]["quantiles"]] for i in range(ranks)], profile, seed)


def rank_correlation(segs: dict, labels: tuple[str, ...] = COMPUTE_ONLY) -> float | None:
    """How the ranks' compute per iteration moves together in the compute-only runs: the mean
    over pairs of ranks of the Pearson correlation of their series, each run centred on its own
    means (None for records without series, or fewer than two ranks)."""
    runs = _compute_by_rank(segs, labels)
    if not runs or min(len(r) for r in runs) < 2 or not _have_series(runs):
        return None
    centred = []
    for run in runs:
        x = np.array([r["series"] for r in run], dtype=float)
        centred.append(x - x.mean(axis=1, keepdims=True))
    a = np.concatenate(centred, axis=1)
    return float(np.mean(np.corrcoef(a)[np.triu_indices(len(a), 1)]))


def _compute_by_rank(segs: dict, labels: tuple[str, ...]) -> list[list[dict]]:
    """``extra.compute_by_rank`` of each of the ``labels`` runs the job has."""
    return [segs[label]["extra"].get("compute_by_rank") or [] for label in labels if label in segs]


def _have_series(runs: list[list[dict]]) -> bool:
    """Every rank of every run keeps its series (records made before they were kept do not)."""
    return all("series" in r for run in runs for r in run)


def engine_host(rec: dict) -> tuple[float, float] | None:
    """The engine's host seconds per op, (launching, completing), waits excluded, over the run's
    untimed first iterations (``warmup_cut``): measured before the iterations predicted, as the
    start-up probes are.  None for records made before the engine timed them, runs that
    launched nothing in those iterations, and CUDA runs, whose host books run ahead of the
    device's compute rather than in its way."""
    device = (rec["config"].get("cluster") or {}).get("device", "cpu")
    if device == "cuda" or (device == "auto" and (rec.get("hardware") or {}).get("gpus")):
        return None
    rows = rec["iterations"][:warmup_cut(len(rec["iterations"]))]
    if not rows or "launch_host" not in rows[0] or not sum(r["ops"] for r in rows):
        return None
    per_op = lambda secs, n: sum(r[secs] for r in rows) / max(1, sum(r[n] for r in rows))  # noqa: E731
    return per_op("launch_host", "ops"), per_op("complete_host", "completed")


def job_chunk(rec: dict) -> int | None:
    """The chunk of the interleaved job the record comes from (its spec.json's, as
    dreamddp-bench run --chunk gave it; 0: one H-window); None for a record outside such a job."""
    spec = Path(rec["_dir"]).parent / "spec.json" if rec.get("_dir") else None
    if spec is None or not spec.is_file():
        return None
    return int(json.loads(spec.read_text()).get("chunk") or 0)


def turn(rec: dict) -> int | None:
    """Iterations per turn of the interleaved job the record comes from (``job_chunk``), each
    turn starting at a barrier (dreamddp/bench/worker.py): what the simulator lines the ranks up
    at (simulate_plan).  None for a record outside such a job."""
    chunk = job_chunk(rec)
    return None if chunk is None else chunk or int(rec["config"]["algo"]["H"])


def _simulate(rec: dict, profile: Profile, skew, windows: int, real: bool, host: bool):
    algo = rec["config"]["algo"]
    return simulate_record(profile, rec["config"], world=rec["extra"]["world_size"], link=record_link(rec),
                           plan=rec["extra"]["algorithm"], skew=skew, carrier=record_carrier(rec) if real else None,
                           carrier_at_step=rec["extra"]["link"].get("carrier") == "step",
                           iterations=windows * int(algo["H"]), host=engine_host(rec) if host else None,
                           interleaving=None if turn(rec) is None else Interleaving(turn(rec)))


def predict(rec: dict, profile: Profile, skew, host: bool = True) -> float:
    """``host=False``: without the engine's host work per op (a counterfactual)."""
    return _simulate(rec, profile, skew, WINDOWS, real=True, host=host).mean_iter


def plan_run(rec: dict, profile: Profile, real: bool = False, host: bool = False):
    """The simulator on the run's own plan with no skew, one window (after the warm-up one):
    ``plan_bound`` is its mean iteration, its ``ops`` what the plan launches.  A bound leaves
    the engine's host work out (``host``), so the fraction of it a run reaches shows that work."""
    return _simulate(rec, profile, None, 1, real, host)


def plan_bound(rec: dict, profile: Profile, real: bool = False, host: bool = False) -> float:
    return plan_run(rec, profile, real, host).mean_iter


def compute_time(profile: Profile) -> float:
    return sum(profile.fwd.values()) + sum(profile.bp.values()) + profile.step_time


def late_parts(rec: dict) -> int:
    """The most parts the run's plan may cut a late collective into (records before the cut: 1)."""
    algo = rec["config"]["algo"]
    return max(1, min(int(algo.get("late_parts") or 1), int(algo["H"])))


def longest_unit(rec: dict, profile: Profile) -> tuple[str, float, float, float, int]:
    """(unit, its all-reduce seconds on the run's link, one iteration's compute, the step, the
    most parts a late collective may be cut into).  A late all-reduce runs behind merge_delay
    iterations of compute less the step it launches after, so a delayed merge reaches the
    compute-only iteration only where every unit's all-reduce, or each of its parts, fits in
    that room."""
    link, world = record_link(rec), rec["extra"]["world_size"]
    comm = {u: link.seconds("all_reduce", profile.nbytes[u], world) for u in profile.units}
    unit = max(comm, key=comm.get)
    return unit, comm[unit], compute_time(profile), profile.step_time, late_parts(rec)


CONTIGUOUS = ("dreamddp", "optimal")  # the schedulers whose plans sync one contiguous run of units per iteration


def structure_bound(label: str, rec: dict, profile: Profile, any_assignment: bool = False) -> float:
    """The least iteration time of any plan of this algorithm's kind (module docstring);
    ``any_assignment``: for DreamDDP, over every assignment of units to iterations, whatever
    its scheduler searches (the general scheduler's kind)."""
    algo = rec["config"]["algo"]
    if algo["name"] != "dreamddp":
        return plan_bound(rec, profile)
    link, world, H = record_link(rec), rec["extra"]["world_size"], int(algo["H"])
    bp, _ = arrays(profile)
    comm = np.array([link.seconds("all_reduce", profile.nbytes[u], world) for u in profile.units])
    compute = compute_time(profile)
    fwd = sum(profile.fwd.values())
    ready = fwd + np.cumsum(bp)
    end = np.full(len(bp), fwd + float(bp.sum()))
    # until the unit's next forward, the synced units' own steps first
    slack, moved = overlap_terms(profile, bool(algo.get("overlap_forward")))
    if slack is not None:
        end = end + slack - moved  # a unit's own step at least (the run's before it: contiguous only)
    synced = comm > 0
    overrun = np.maximum(0.0, comm - (end - ready))  # in place, alone on the link (hiding_bound's terms)
    delay = int(algo.get("merge_delay") or 0)
    if not delay and algo.get("scheduler", "dreamddp") in CONTIGUOUS and not any_assignment:
        if algo.get("fuse") and slack is None:  # fused runs pay a collective's fixed cost once, not per unit
            fixed = link.seconds("all_reduce", 0, world)
            return compute + optimal_cuts(bp, np.where(comm > 0, comm - fixed, 0.0), H)[0] / H
        return compute + optimal_cuts(bp, comm, H, slack, moved)[0] / H
    if not delay:
        return compute + hiding_bound(ready[synced], comm[synced], end[synced]) / H
    # merged late: from after the step to the end of backward d iterations later, alone on the link,
    # in as many parts as the run may cut it into; and no plan keeps the link busier than the window
    late = np.maximum(0.0, comm / late_parts(rec) - late_room(compute, profile.step_time, delay))
    return max(compute + float(np.minimum(overrun, late)[synced].sum()) / H, float(comm.sum()) / H)
