"""Discrete-event iteration-time simulator of OUR engine (not the authors' model).

One iteration: forward (sum of ``fwd``), then backward, unit i's gradient
ready at ``fwd + bp[0] + ... + bp[i]``; collectives launched during backward
queue on a FIFO link; the worker waits for the link after backward, runs any
blocking collective, steps (``step_time``), then runs any blocking
post-step collective.  Exposed wait = everything spent blocked on the link.
The link is empty at every iteration boundary, so iterations are independent
and only t mod H matters; plans with cross-iteration jobs (dear,
dreamddp_overlap, streaming_diloco) run through ``simulate_sequence`` instead,
over one warm-up window and then the measured iterations.

The link is either the profile's measured per-unit comm times (``gbps=None``;
they already embody the world size and bandwidth they were measured at, so
``world`` is ignored) or the ring model ``dreamddp.comm.link.collective_time``
applied to the profile's ``nbytes`` (then a fused collective pays the latency
once, per-unit collectives each pay it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from dreamddp.schedule.cost import arrays
from dreamddp.schedule.plans import NEEDS_SCHEDULE, PLANS, IterPlan, SimContext, default_window, modelled_link
from dreamddp.schedule.profile import Profile


@dataclass
class SimResult:
    mean_iter: float
    mean_wait: float
    per_iter: list[tuple[float, float]]  # (iteration time, exposed wait)


def simulate_iteration(plan: IterPlan, fwd: float, bp: np.ndarray, step_time: float) -> tuple[float, float]:
    """(iteration time, exposed wait) of one iteration under ``plan``."""
    ready = fwd + np.cumsum(bp)
    end = fwd + float(bp.sum())
    t = 0.0
    for launch, dur in sorted(plan.overlapped, key=lambda job: ready[job[0]]):  # stable: FIFO by launch
        t = max(t, float(ready[launch])) + dur
    wait = max(0.0, t - end) + plan.after_backward + plan.after_step
    return end + wait + step_time, wait


def simulate_sequence(plans: list[IterPlan], fwd: np.ndarray, bp: np.ndarray, step_time: float) -> list[tuple[float, float]]:
    """(iteration time, exposed wait) of consecutive iterations whose traffic may cross boundaries.

    The FIFO link and the pending completions carry over: forward runs units in
    reverse backward order (``fwd[i]`` seconds each), and a unit's pre-hook first
    launches the ``next_forward`` jobs placed there, then waits for whatever its
    forward needs (``deferred`` / ``next_forward``).  Backward launches
    ``overlapped`` (waited at its end) and ``deferred`` jobs; then the blocking
    ``after_backward``, the step, the blocking ``after_step``; then ``lagged``
    jobs launch and the ones due at this iteration are waited for.  For plans
    without cross-iteration jobs this equals ``simulate_iteration``.
    """
    link = clock = 0.0
    need: dict[int, float] = {}  # unit -> when the collectives its next forward waits for finish
    chain: list = []  # the previous iteration's next_forward jobs
    lagged: list[tuple[int, float]] = []  # (iteration due, finish)
    out = []

    def queue(launch: float, dur: float) -> float:
        nonlocal link
        link = max(link, launch) + dur
        return link

    for k, plan in enumerate(plans):
        start, wait = clock, 0.0
        at: dict = {}
        for where, dur, unit in chain:
            at.setdefault(where, []).append((dur, unit))
        for u in [None, *range(len(bp) - 1, -1, -1)]:  # start of forward, then forward order
            for dur, unit in at.get(u, ()):
                need[unit] = max(need.get(unit, 0.0), queue(clock, dur))
            if u is None:
                continue
            w = max(0.0, need.pop(u, 0.0) - clock)
            clock += w + float(fwd[u])
            wait += w
        ready = clock + np.cumsum(bp)
        end = clock + float(bp.sum())
        jobs = [(ready[i], d, None) for i, d in plan.overlapped] + [(ready[i], d, v) for i, d, v in plan.deferred]
        finish = end
        for r, dur, unit in sorted(jobs, key=lambda j: j[0]):  # stable: FIFO by launch
            done = queue(float(r), dur)
            if unit is None:
                finish = max(finish, done)
            else:
                need[unit] = max(need.get(unit, 0.0), done)
        wait += finish - end
        clock = finish
        for blocking in (plan.after_backward, None, plan.after_step):
            if blocking is None:
                clock += step_time
            elif blocking:
                done = queue(clock, blocking)
                wait += done - clock
                clock = done
        lagged += [(k + lag, queue(clock, dur)) for dur, lag in plan.lagged]
        due = [f for d, f in lagged if d <= k]
        lagged = [(d, f) for d, f in lagged if d > k]
        if due:
            w = max(0.0, max(due) - clock)
            clock += w
            wait += w
        chain = list(plan.next_forward)
        out.append((clock - start, wait))
    return out


def _context(profile: Profile, H: int, world: int, gbps, latency_s, calibration, bucket_bytes) -> SimContext:
    _, comm = arrays(profile)
    if gbps is None:
        link = None
        has_params = np.array([profile.nbytes[u] > 0 if profile.nbytes else profile.comm.get(u, 0.0) > 0 for u in profile.units])
        unit_comm = comm
    else:
        if not profile.nbytes:
            raise ValueError("profile has no nbytes: a modelled link (gbps) needs per-unit bytes; omit gbps to use measured comm")
        missing = [u for u in profile.units if u not in profile.nbytes]
        if missing:
            raise ValueError(f"profile nbytes lacks {len(missing)} unit(s), first {missing[0]!r}")
        link = modelled_link(world, gbps, latency_s, calibration)
        has_params = np.array([profile.nbytes[u] > 0 for u in profile.units])
        unit_comm = np.array([link(profile.nbytes[u]) if p else 0.0 for u, p in zip(profile.units, has_params)])
    ctx = SimContext(profile, H, world, bucket_bytes, unit_comm, has_params, link)
    ctx.link_model = None if gbps is None else (gbps, latency_s, calibration)
    return ctx


def simulate(
    algo: str,
    profile: Profile,
    *,
    H: int = 10,
    schedule: dict[str, list[int]] | None = None,
    world: int = 2,
    gbps: float | None = None,
    latency_s: float = 0.0,
    calibration: float = 1.0,
    bucket_bytes: int = 25 * 2**20,
    iterations: int | None = None,
    options: dict | None = None,
) -> SimResult:
    """Mean iteration time and exposed wait of ``algo`` over ``iterations`` (default: one H-window)."""
    if algo not in PLANS:
        raise ValueError(f"algo: unknown {algo!r} (expected one of {', '.join(sorted(PLANS))})")
    if not isinstance(H, int) or H < 1:
        raise ValueError(f"H must be an integer >= 1, got {H!r}")
    if not isinstance(world, int) or world < 1:
        raise ValueError(f"world must be an integer >= 1, got {world!r}")
    if bucket_bytes < 1:
        raise ValueError(f"bucket_bytes must be >= 1, got {bucket_bytes}")
    n = H if iterations is None else iterations
    if n < 1:
        raise ValueError(f"iterations must be >= 1, got {n}")
    if not profile.units:
        raise ValueError("profile has no units")
    ctx = _context(profile, H, world, gbps, latency_s, calibration, bucket_bytes)
    if algo in NEEDS_SCHEDULE:
        link_profile = replace(profile, comm=dict(zip(profile.units, ctx.unit_comm.tolist())))
        ctx.window = default_window(algo, profile, H, schedule, link_profile)
    ctx.options = dict(options or {})
    bp, _ = arrays(profile)
    fwd = float(sum(profile.fwd.values()))
    first = [PLANS[algo](ctx, t) for t in range(min(n, H))]
    if any(p.crosses_iterations for p in first):
        # One warm-up window (the first iteration has nothing in flight), then n measured iterations.
        per_unit = np.array([profile.fwd.get(u, 0.0) for u in profile.units], dtype=float)
        per_unit[-1] += fwd - per_unit.sum()  # forward time of modules that are not units: at the start
        seq = simulate_sequence([PLANS[algo](ctx, t) for t in range(H + n)], per_unit, bp, profile.step_time)
        per_iter = seq[H:]
        return SimResult(
            mean_iter=float(np.mean([p[0] for p in per_iter])),
            mean_wait=float(np.mean([p[1] for p in per_iter])),
            per_iter=per_iter,
        )
    per_window = [simulate_iteration(plan, fwd, bp, profile.step_time) for plan in first]
    per_iter = [per_window[t % H] for t in range(n)]
    return SimResult(
        mean_iter=float(np.mean([p[0] for p in per_iter])),
        mean_wait=float(np.mean([p[1] for p in per_iter])),
        per_iter=per_iter,
    )


def simulate_run(profile: Profile, algo_cfg: Mapping, bandwidth_cfg: Mapping, *, world: int,
                 gbps: float | None, groups: list[list[int]] | None = None,
                 schedule: dict[str, list[int]] | None = None) -> SimResult:
    """One H-window of a run as it was configured (a run record's ``config.algo`` / ``config.bandwidth``).

    ``groups`` is the engine's own per-iteration unit assignment (indices into
    ``profile.units``, as a partial-sync algorithm's ``describe()`` records it),
    so the model simulates what ran rather than re-deriving it.
    """
    name = algo_cfg["name"]
    if name == "dreamddp" and algo_cfg.get("overlap_forward"):
        name = "dreamddp_overlap"
    if groups is not None and name in NEEDS_SCHEDULE:
        schedule = {u: [t for t, g in enumerate(groups) if i in g] for i, u in enumerate(profile.units)}
    return simulate(name, profile, H=algo_cfg["H"], schedule=schedule, world=world, gbps=gbps,
                    latency_s=bandwidth_cfg["latency_ms"] / 1e3, calibration=bandwidth_cfg["calibration"],
                    bucket_bytes=int(algo_cfg["bucket_mb"] * 2**20), iterations=algo_cfg["H"],
                    options=dict(algo_cfg))
