"""Discrete-event iteration-time simulator of OUR engine (not the authors' model).

One iteration: forward (sum of ``fwd``), then backward, unit i's gradient
ready at ``fwd + bp[0] + ... + bp[i]``; collectives launched during backward
queue on a FIFO link; the worker waits for the link after backward, runs any
blocking collective, steps (``step_time``), then runs any blocking
post-step collective.  Exposed wait = everything spent blocked on the link.
The link is empty at every iteration boundary, so iterations are independent
and only t mod H matters; plans with cross-iteration jobs (dear, dreamddp
with overlap_forward, streaming_diloco) run through ``simulate_sequence``
instead, over one warm-up window and then the measured iterations.

What an algorithm puts on the link in iteration t is its own business: each
algorithm module builds an ``IterPlan`` per iteration from a ``SimContext``
(``Algorithm.simulation``); this module only times plans.  The link is either
the profile's measured per-unit comm times (``link=None``; they already
embody the world size and bandwidth they were measured at) or a
``comm.cost.LinkModel`` applied to the profile's ``nbytes`` (then a fused
collective pays the latency once, per-unit collectives each pay it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from dreamddp.comm.cost import LinkModel, ring_factor
from dreamddp.schedule.cost import arrays
from dreamddp.schedule.partition import buckets
from dreamddp.schedule.profile import Profile


@dataclass
class IterPlan:
    overlapped: list[tuple[int, float]] = field(default_factory=list)  # (unit whose gradient launches it, seconds)
    after_backward: float = 0.0  # blocking collective between backward and the step
    after_step: float = 0.0  # blocking collective after the optimizer step
    # Cross-iteration jobs (simulate_sequence; the link is no longer empty between iterations):
    # (unit whose gradient launches it, seconds, unit whose NEXT forward pre-hook waits for it)
    deferred: list[tuple[int, float, int]] = field(default_factory=list)
    # launched in the NEXT iteration's forward, in the pre-hook of unit ``at`` (None: at its start),
    # waited in the pre-hook of unit ``need``: (at, seconds, need)
    next_forward: list[tuple[int | None, float, int]] = field(default_factory=list)
    # launched after the optimizer step, waited after the step ``lag`` iterations later: (seconds, lag)
    lagged: list[tuple[float, int]] = field(default_factory=list)

    @property
    def crosses_iterations(self) -> bool:
        return bool(self.deferred or self.next_forward or self.lagged)


PlanFn = Callable[[int], IterPlan]


@dataclass
class SimContext:
    """What an algorithm's simulation sees: the profile, its own config, the world and the link."""

    profile: Profile
    cfg: object  # the algorithm's config (algo.*: H and its own options)
    world: int
    link: LinkModel | None = None  # None: the profile's measured per-unit comm times
    schedule: dict[str, list[int]] | None = None  # a given unit -> iterations assignment (None: the algorithm's own)
    runs: list[list[tuple[int, int]]] | None = None  # with ``schedule``: its collectives per iteration (unit indices)

    def __post_init__(self) -> None:
        units, nbytes = self.profile.units, self.profile.nbytes
        if self.link is not None:
            if not nbytes:
                raise ValueError("profile has no nbytes: a modelled link needs per-unit bytes; use measured comm times")
            missing = [u for u in units if u not in nbytes]
            if missing:
                raise ValueError(f"profile nbytes lacks {len(missing)} unit(s), first {missing[0]!r}")
        # A unit sends something only if it owns parameters: bytes > 0 where the profile
        # has nbytes, else a measured comm time > 0.
        self.has_params = np.array([nbytes[u] > 0 if nbytes else self.profile.comm.get(u, 0.0) > 0 for u in units])
        if self.link is None:
            self.unit_comm = arrays(self.profile)[1]
        else:
            self.unit_comm = np.array([self.collective([i]) for i in range(len(units))])

    @property
    def H(self) -> int:
        return int(self.cfg.H)

    @property
    def n_units(self) -> int:
        return len(self.profile.units)

    def _bytes(self, idx) -> int:
        units = self.profile.units
        return sum(self.profile.nbytes.get(units[i], 0) for i in idx)

    def collective(self, idx) -> float:
        """Seconds of ONE all-reduce over the parameters of units ``idx``."""
        idx = [i for i in idx if self.has_params[i]]
        if not idx:
            return 0.0
        if self.link is None:
            return float(sum(self.unit_comm[i] for i in idx))
        return self.link.seconds("all_reduce", self._bytes(idx), self.world)

    def collective_as(self, idx, kind: str, scale: float = 1.0) -> float:
        """Seconds of ONE ``kind`` collective whose accounted payload is ``scale`` times the
        fp32 bytes of units ``idx``.  With measured times, the units' all-reduce seconds are
        rescaled by the ring factors and ``scale`` (their latency terms scale too: an estimate)."""
        idx = [i for i in idx if self.has_params[i]]
        if not idx or self.world < 2:
            return 0.0
        if self.link is None:
            seconds = float(sum(self.unit_comm[i] for i in idx))
            return seconds * scale * ring_factor(kind, self.world) / ring_factor("all_reduce", self.world)
        return self.link.seconds(kind, int(self._bytes(idx) * scale), self.world)

    def per_unit(self, idx) -> list[tuple[int, float]]:
        """One all-reduce per unit, launched at its gradient."""
        return [(i, float(self.unit_comm[i])) for i in sorted(idx) if self.has_params[i]]

    def per_run(self, runs) -> list[tuple[int, float]]:
        """One all-reduce per run (first, last), launched at its last unit's gradient."""
        return [(b, self.collective(range(a, b + 1))) for a, b in runs]

    @property
    def alpha_s(self) -> float:
        """The per-collective cost the link charges (0 with measured comm times)."""
        return self.link.alpha_s if self.link is not None else 0.0

    def buckets(self, cap_bytes: int) -> list[list[int]]:
        """partition.buckets over the units that own parameters; without byte counts every
        such unit is its own bucket."""
        idx = [i for i in range(self.n_units) if self.has_params[i]]
        if not self.profile.nbytes:
            return [[i] for i in idx]
        sizes = [self.profile.nbytes.get(self.profile.units[i], 0) for i in idx]
        return [idx[a : b + 1] for a, b in buckets(sizes, cap_bytes)]

    def with_link_comm(self) -> Profile:
        """The profile with comm replaced by this link's per-unit all-reduce seconds (what a
        scheduler should plan with)."""
        return replace(self.profile, comm=dict(zip(self.profile.units, self.unit_comm.tolist())))


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


def run_plans(plan: PlanFn, profile: Profile, H: int, iterations: int | None = None) -> SimResult:
    """Mean iteration time and exposed wait of the plans ``plan(t)`` over ``iterations``
    (default: one H-window)."""
    if not isinstance(H, int) or H < 1:
        raise ValueError(f"H must be an integer >= 1, got {H!r}")
    n = H if iterations is None else iterations
    if n < 1:
        raise ValueError(f"iterations must be >= 1, got {n}")
    if not profile.units:
        raise ValueError("profile has no units")
    bp, _ = arrays(profile)
    fwd = float(sum(profile.fwd.values()))
    first = [plan(t) for t in range(min(n, H))]
    if any(p.crosses_iterations for p in first):
        # One warm-up window (the first iteration has nothing in flight), then n measured iterations.
        per_unit = np.array([profile.fwd.get(u, 0.0) for u in profile.units], dtype=float)
        per_unit[-1] += fwd - per_unit.sum()  # forward time of modules that are not units: at the start
        per_iter = simulate_sequence([plan(t) for t in range(H + n)], per_unit, bp, profile.step_time)[H:]
    else:
        per_window = [simulate_iteration(p, fwd, bp, profile.step_time) for p in first]
        per_iter = [per_window[t % H] for t in range(n)]
    return SimResult(
        mean_iter=float(np.mean([p[0] for p in per_iter])),
        mean_wait=float(np.mean([p[1] for p in per_iter])),
        per_iter=per_iter,
    )
