"""Discrete-event iteration-time simulator of OUR engine (not the authors' model).

One iteration: forward (sum of ``fwd``), then backward, unit i's gradient
ready at ``fwd + bp[0] + ... + bp[i]``; collectives launched during backward
queue on a FIFO link; the worker waits for the link after backward, runs any
blocking collective, steps (``step_time``), then runs any blocking
post-step collective.  Exposed wait = everything spent blocked on the link.
The link is empty at every iteration boundary, so iterations are independent
and only t mod H matters.

The link is either the profile's measured per-unit comm times (``gbps=None``;
they already embody the world size and bandwidth they were measured at, so
``world`` is ignored) or the ring model ``dreamddp.comm.link.collective_time``
applied to the profile's ``nbytes`` (then a fused collective pays the latency
once, per-unit collectives each pay it).
"""

from __future__ import annotations

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
    return SimContext(profile, H, world, bucket_bytes, unit_comm, has_params, link)


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
    bp, _ = arrays(profile)
    fwd = float(sum(profile.fwd.values()))
    per_window = [simulate_iteration(PLANS[algo](ctx, t), fwd, bp, profile.step_time) for t in range(min(n, H))]
    per_iter = [per_window[t % H] for t in range(n)]
    return SimResult(
        mean_iter=float(np.mean([p[0] for p in per_iter])),
        mean_wait=float(np.mean([p[1] for p in per_iter])),
        per_iter=per_iter,
    )
