"""What each algorithm puts on the link in iteration t, as the engine does it.

A plan builder maps (context, t) to an ``IterPlan``: the collectives launched
during backward (each when a given unit's gradient is ready; the link is FIFO)
and the blocking ones after backward or after the optimizer step.  Builders
register by name in ``PLANS``; an algorithm added to the engine later
(streaming_diloco, dear) adds a builder here and, if it needs a new launch
point, a field on ``IterPlan`` that ``simulator.simulate_iteration`` honours.

A unit sends something only if it owns parameters: bytes > 0 where the profile
has ``nbytes``, else a measured comm time > 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from dreamddp.comm.link import collective_time
from dreamddp.schedule.cost import groups
from dreamddp.schedule.enp import enp
from dreamddp.schedule.make import make_schedule
from dreamddp.schedule.profile import Profile


@dataclass
class IterPlan:
    overlapped: list[tuple[int, float]] = field(default_factory=list)  # (unit whose gradient launches it, seconds)
    after_backward: float = 0.0  # blocking collective between backward and the step
    after_step: float = 0.0  # blocking collective after the optimizer step


@dataclass
class SimContext:
    profile: Profile
    H: int
    world: int
    bucket_bytes: int
    unit_comm: np.ndarray  # per-unit all-reduce seconds on this link, backward order
    has_params: np.ndarray  # bool per unit
    link: Callable[[int], float] | None  # bytes -> all-reduce seconds; None = measured times
    window: list[list[int]] = field(default_factory=list)  # scheduled units per iteration (t mod H)

    def collective(self, idx) -> float:
        """Seconds of ONE all-reduce over the parameters of units ``idx``."""
        idx = [i for i in idx if self.has_params[i]]
        if not idx:
            return 0.0
        if self.link is None:
            return float(sum(self.unit_comm[i] for i in idx))
        units = self.profile.units
        return self.link(sum(self.profile.nbytes.get(units[i], 0) for i in idx))

    def per_unit(self, idx) -> list[tuple[int, float]]:
        """One all-reduce per unit, launched at its gradient."""
        return [(i, float(self.unit_comm[i])) for i in sorted(idx) if self.has_params[i]]


PLANS: dict[str, Callable[[SimContext, int], IterPlan]] = {}
NEEDS_SCHEDULE = {"plsgd_enp", "dreamddp"}  # builders that read ``ctx.window``


def register_plan(name: str):
    def deco(fn: Callable[[SimContext, int], IterPlan]):
        PLANS[name] = fn
        return fn

    return deco


def modelled_link(world: int, gbps: float, latency_s: float, calibration: float) -> Callable[[int], float]:
    return lambda nbytes: collective_time("all_reduce", int(nbytes), world, gbps, latency_s, calibration)


def buckets(ctx: SimContext) -> list[list[int]]:
    """DDP-style: consecutive units in backward order, a bucket closes once it
    holds >= bucket_bytes; without byte counts every unit is its own bucket."""
    units, nbytes = ctx.profile.units, ctx.profile.nbytes
    out, cur, size = [], [], 0
    for i in range(len(units)):
        if not ctx.has_params[i]:
            continue
        cur.append(i)
        size += nbytes.get(units[i], 0)
        if not nbytes or size >= ctx.bucket_bytes:
            out.append(cur)
            cur, size = [], 0
    if cur:
        out.append(cur)
    return out


@register_plan("ssgd")
def _ssgd(ctx: SimContext, t: int) -> IterPlan:
    return IterPlan(after_backward=ctx.collective(range(len(ctx.profile.units))))


@register_plan("ascwfbp")
def _ascwfbp(ctx: SimContext, t: int) -> IterPlan:
    return IterPlan(overlapped=[(b[-1], ctx.collective(b)) for b in buckets(ctx)])


@register_plan("flsgd")
def _flsgd(ctx: SimContext, t: int) -> IterPlan:
    last = (t + 1) % ctx.H == 0
    return IterPlan(after_step=ctx.collective(range(len(ctx.profile.units))) if last else 0.0)


@register_plan("dreamddp")
@register_plan("plsgd_enp")
def _partial(ctx: SimContext, t: int) -> IterPlan:
    return IterPlan(overlapped=ctx.per_unit(ctx.window[t % ctx.H]))


def default_window(algo: str, profile: Profile, H: int, schedule, link_profile: Profile) -> list[list[int]]:
    """Units synced per iteration: ENP chunks, or the given / DreamDDP schedule."""
    if algo == "plsgd_enp":
        schedule = enp(profile.units, H) if schedule is None else schedule
    elif schedule is None:
        schedule = make_schedule(link_profile, H)  # the DFS on this link's comm times
    return groups(profile, H, schedule)
