"""What each algorithm puts on the link in iteration t, as the engine does it.

A plan builder maps (context, t) to an ``IterPlan``: the collectives launched
during backward (each when a given unit's gradient is ready; the link is FIFO)
and the blocking ones after backward or after the optimizer step.  Builders
register by name in ``PLANS``.  Algorithms whose traffic crosses iteration
boundaries (dear's all-gathers in the next forward, dreamddp with
overlap_forward, streaming_diloco's tau-step merges) use the ``deferred``,
``next_forward`` and ``lagged`` fields, which ``simulator.simulate_sequence``
honours.

A unit sends something only if it owns parameters: bytes > 0 where the profile
has ``nbytes``, else a measured comm time > 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from dreamddp.algorithms.fragments import fragments
from dreamddp.algorithms.quantize import Codec
from dreamddp.comm.link import collective_time, ring_factor
from dreamddp.schedule.cost import groups
from dreamddp.schedule.enp import enp
from dreamddp.schedule.make import make_schedule
from dreamddp.schedule.profile import Profile


@dataclass
class IterPlan:
    overlapped: list[tuple[int, float]] = field(default_factory=list)  # (unit whose gradient launches it, seconds)
    after_backward: float = 0.0  # blocking collective between backward and the step
    after_step: float = 0.0  # blocking collective after the optimizer step
    # Cross-iteration jobs (simulator.simulate_sequence; the link is no longer empty between iterations):
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
    link_model: tuple[float, float, float] | None = None  # (gbps, latency_s, calibration); None = measured
    options: dict = field(default_factory=dict)  # algorithm options (streaming_diloco: fragments, tau, quantize, ...)

    def collective(self, idx) -> float:
        """Seconds of ONE all-reduce over the parameters of units ``idx``."""
        idx = [i for i in idx if self.has_params[i]]
        if not idx:
            return 0.0
        if self.link is None:
            return float(sum(self.unit_comm[i] for i in idx))
        units = self.profile.units
        return self.link(sum(self.profile.nbytes.get(units[i], 0) for i in idx))

    def collective_as(self, idx, kind: str, scale: float = 1.0) -> float:
        """Seconds of ONE ``kind`` collective whose accounted payload is ``scale`` times the
        fp32 bytes of units ``idx``.  With measured times, the units' all-reduce seconds are
        rescaled by the ring factors and ``scale`` (their latency terms scale too: an estimate)."""
        idx = [i for i in idx if self.has_params[i]]
        if not idx or self.world < 2:
            return 0.0
        if self.link_model is None:
            seconds = float(sum(self.unit_comm[i] for i in idx))
            return seconds * scale * ring_factor(kind, self.world) / ring_factor("all_reduce", self.world)
        gbps, latency_s, calibration = self.link_model
        units = self.profile.units
        nbytes = sum(self.profile.nbytes.get(units[i], 0) for i in idx)
        return collective_time(kind, int(nbytes * scale), self.world, gbps, latency_s, calibration)

    def per_unit(self, idx) -> list[tuple[int, float]]:
        """One all-reduce per unit, launched at its gradient."""
        return [(i, float(self.unit_comm[i])) for i in sorted(idx) if self.has_params[i]]


PLANS: dict[str, Callable[[SimContext, int], IterPlan]] = {}
NEEDS_SCHEDULE = {"plsgd_enp", "dreamddp", "dreamddp_overlap"}  # builders that read ``ctx.window``


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


@register_plan("dreamddp_overlap")
def _partial_overlap(ctx: SimContext, t: int) -> IterPlan:
    """dreamddp with overlap_forward: each average is waited in its unit's next forward."""
    return IterPlan(deferred=[(i, c, i) for i, c in ctx.per_unit(ctx.window[t % ctx.H])])


@register_plan("dear")
def _dear(ctx: SimContext, t: int) -> IterPlan:
    """Reduce-scatter per fused group at its last gradient; all-gathers chained through the
    next forward (the first at its start, each next one at the previous group's pre-hook)."""
    groups = buckets(ctx)  # backward order; a group's forward-first unit is its highest index
    rs = [(g[-1], ctx.collective_as(g, "reduce_scatter"), g[-1]) for g in groups]
    chain, at = [], None
    for g in sorted(groups, key=lambda g: -g[-1]):
        chain.append((at, ctx.collective_as(g, "all_gather"), g[-1]))
        at = g[-1]
    return IterPlan(deferred=rs, next_forward=chain)


@register_plan("streaming_diloco")
def _streaming_diloco(ctx: SimContext, t: int) -> IterPlan:
    """Fragments staggered over H (streaming_diloco.py's offsets), each outer all-reduce (or
    all-gather of fp16 / E3M0 payloads) launched after the step and waited tau steps later."""
    o = ctx.options
    P, tau, q = int(o.get("fragments", 1)), int(o.get("tau", 0)), o.get("quantize", "none")
    frags = fragments(ctx.profile.units, P, o.get("fragment_pattern", "strided"))
    lagged = []
    for p in range(P):
        if (t + 1) % ctx.H != ((p + 1) * ctx.H // P) % ctx.H:
            continue
        if q == "none":
            lagged.append((ctx.collective_as(frags[p], "all_reduce"), tau))
        else:  # every rank's payload gathered: world x (payload bytes per fp32 byte)
            codec, numel = Codec(q, int(o.get("quant_block", 1024))), 2**20
            lagged.append((ctx.collective_as(frags[p], "all_gather", ctx.world * codec.nbytes(numel) / (4 * numel)), tau))
    return IterPlan(lagged=lagged)


def default_window(algo: str, profile: Profile, H: int, schedule, link_profile: Profile) -> list[list[int]]:
    """Units synced per iteration: ENP chunks, or the given / DreamDDP schedule."""
    if algo == "plsgd_enp":
        schedule = enp(profile.units, H) if schedule is None else schedule
    elif schedule is None:
        schedule = make_schedule(link_profile, H)  # the DFS on this link's comm times
    return groups(profile, H, schedule)
