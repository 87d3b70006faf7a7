"""One entry point for every scheduler: profile + H -> which units sync when, in which collectives.

What each scheduler optimises, under which cost model (``cost``: FIFO link,
each unit's all-reduce launched at its gradient, wait = drain - end of backward):

- ``dreamddp``: the paper's DFS over CONTIGUOUS splits (each iteration syncs one
  run of consecutive units, one collective per unit), then bubble filling; where
  each collective costs ``alpha`` its units are then fused into fewer collectives
  where that drains sooner (fuse.py);
- ``optimal``: the exact optimum over contiguous splits (same model), then
  bubble filling;
- both, with ``overlap`` (``algo.overlap_forward``): the same search with each
  average due at its unit's next forward pre-hook instead of the end of
  backward (``cost.forward_slack``, earlier by the steps of the run's units up
  to it, ``cost.step_moved``), the wait the run's worst lateness: the paper's
  model would plan for waits the run does not have (bubble filling keeps an
  extra only where no member's lateness grows, under the same deadlines);
- ``general``: GENERAL assignments (any subset per iteration) and their
  grouping into collectives, under the alpha-beta model where every collective
  pays ``alpha`` (general.py); never worse than the contiguous optimum (with
  ``overlap`` its search still prices waits at the end of backward, and the
  contiguous optimum under the forward deadlines replaces its plan where that
  waits less);
- ``enp``: PLSGD-ENP's equal-count partition (the baseline, never filled).

Profiles hold each unit's measured blocking all-reduce time, which includes
alpha; the general scheduler plans with the bandwidth term (comm - alpha) and
charges alpha per collective itself.
"""

from __future__ import annotations

from dataclasses import replace

from dreamddp.schedule.bubble import bubble_fill
from dreamddp.schedule.dfs import dreamddp
from dreamddp.schedule.fuse import fuse
from dreamddp.schedule.general import general
from dreamddp.schedule.optimal import optimal
from dreamddp.schedule.partition import equal_count_groups
from dreamddp.schedule.profile import Profile

SCHEDULERS = ("dreamddp", "optimal", "general", "enp")
Runs = list[list[tuple[str, str]]]  # per iteration, its collectives as (first, last) unit names


def enp(units: list[str], H: int) -> dict[str, list[int]]:
    """PLSGD-ENP's assignment: the engine's equal-count partition (partition.equal_count_groups)."""
    return {units[u]: [g] for g, group in enumerate(equal_count_groups(len(units), H)) for u in group}


def make_plan(profile: Profile, H: int, scheduler: str = "dreamddp", bubble: bool = True,
              alpha: float = 0.0, overlap: bool = False, fused: bool = True) -> tuple[dict[str, list[int]], Runs | None]:
    """(unit -> iterations, collectives per iteration or None for one collective per unit).
    ``overlap``: the run overlaps the averages with the next forward (``algo.overlap_forward``),
    so the contiguous schedulers plan with each average due at its unit's forward pre-hook;
    ``fused``: the contiguous schedulers' units fused into fewer collectives where that pays."""
    if not isinstance(H, int) or H < 1:
        raise ValueError(f"H must be an integer >= 1, got {H!r}")
    if scheduler == "enp":
        return enp(profile.units, H), None
    if scheduler == "general":
        # The bandwidth term of each unit with parameters (kept > 0 so it is still synced).
        bandwidth = {u: max(t - alpha, 1e-12) if t > 0 else 0.0 for u, t in profile.comm.items()}
        return general(replace(profile, comm=bandwidth), H, alpha, overlap)
    if scheduler == "dreamddp":
        schedule = dreamddp(profile, H, overlap)
    elif scheduler == "optimal":
        schedule = optimal(profile, H, overlap)
    else:
        raise ValueError(f"scheduler: unknown {scheduler!r} (expected one of {', '.join(SCHEDULERS)})")
    schedule = bubble_fill(profile, H, schedule, overlap) if bubble else schedule
    # the paper's plan is one collective per unit; where each collective costs alpha, fused
    # runs drain sooner (fuse.py; planned for the end of backward, so not under overlap)
    return schedule, (fuse(profile, H, schedule, alpha) if fused and not overlap else None)


def make_schedule(profile: Profile, H: int, scheduler: str = "dreamddp", bubble: bool = True,
                  alpha: float = 0.0, overlap: bool = False) -> dict[str, list[int]]:
    """The unit -> iterations part of ``make_plan``."""
    return make_plan(profile, H, scheduler, bubble, alpha, overlap)[0]
