"""One entry point for every scheduler: profile + H -> unit -> iterations."""

from __future__ import annotations

from dreamddp.schedule.bubble import bubble_fill
from dreamddp.schedule.dfs import dreamddp
from dreamddp.schedule.optimal import optimal
from dreamddp.schedule.partition import equal_count_groups
from dreamddp.schedule.profile import Profile

SCHEDULERS = ("dreamddp", "enp", "optimal")


def enp(units: list[str], H: int) -> dict[str, list[int]]:
    """PLSGD-ENP's assignment: the engine's equal-count partition (partition.equal_count_groups)."""
    return {units[u]: [g] for g, group in enumerate(equal_count_groups(len(units), H)) for u in group}


def make_schedule(profile: Profile, H: int, scheduler: str = "dreamddp", bubble: bool = True) -> dict[str, list[int]]:
    """Schedule for one H-window.

    ``dreamddp`` is the paper's DFS over contiguous splits, ``optimal`` the exact
    optimum over contiguous splits; ``bubble`` adds DreamDDP's bubble filling to
    either.  ``enp`` is the PLSGD-ENP baseline and is never filled.
    """
    if not isinstance(H, int) or H < 1:
        raise ValueError(f"H must be an integer >= 1, got {H!r}")
    if scheduler == "enp":
        return enp(profile.units, H)
    if scheduler == "dreamddp":
        schedule = dreamddp(profile, H)
    elif scheduler == "optimal":
        schedule = optimal(profile, H)
    else:
        raise ValueError(f"scheduler: unknown {scheduler!r} (expected one of {', '.join(SCHEDULERS)})")
    return bubble_fill(profile, H, schedule) if bubble else schedule
