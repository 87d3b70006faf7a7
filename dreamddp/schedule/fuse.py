"""Fusing consecutive units of one iteration into one collective, where the link's cost per
collective makes that shorten the iteration's drain.

Each iteration of a contiguous schedule syncs some units, each launched when its gradient is
ready, through a FIFO link where every collective pays ``alpha`` (its cost whatever its size:
the backend's own, and a paced link's latency hops) plus its bytes.  A collective of units
i..k launches when k is ready and costs alpha once, so on a link with a long round trip a
few fused collectives drain sooner than one per unit.  Per iteration an exact dynamic
program over its synced units in backward order picks the grouping whose last collective
completes first: the finish of a prefix only ever delays what follows, so the least finish
of each prefix is all the next group needs.  A group spans units synced in that iteration
only; ties keep units apart (the paper's one collective per unit).
"""

from __future__ import annotations

import numpy as np

from dreamddp.schedule.cost import arrays
from dreamddp.schedule.profile import Profile

TIE = 1e-12


def _segments(synced: list[int]) -> list[list[int]]:
    """Maximal runs of consecutive unit indices."""
    out: list[list[int]] = []
    for i in synced:
        if out and out[-1][-1] == i - 1:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def fuse_iteration(ready: np.ndarray, bandwidth: np.ndarray, synced: list[int], alpha: float) -> list[tuple[int, int]]:
    """The collectives (first, last unit index) of one iteration's ``synced`` units (sorted)."""
    best: list[float] = []  # least finish of the prefix ending at position k
    start: list[int] = []  # where the last group of that prefix starts (a position in synced)
    seg_of = {i: s for s, seg in enumerate(_segments(synced)) for i in seg}
    for k, unit in enumerate(synced):
        choice, finish, load = k, None, 0.0
        for j in range(k, -1, -1):  # the last group is synced[j..k]
            if seg_of[synced[j]] != seg_of[unit]:
                break
            load += bandwidth[synced[j]]
            before = best[j - 1] if j else 0.0
            f = max(before, float(ready[unit])) + alpha + load
            if finish is None or f < finish - TIE:
                choice, finish = j, f
        best.append(finish)
        start.append(choice)
    groups, k = [], len(synced) - 1
    while k >= 0:
        groups.append((synced[start[k]], synced[k]))
        k = start[k] - 1
    return groups[::-1]


def fuse(profile: Profile, H: int, schedule: dict[str, list[int]], alpha: float) -> list[list[tuple[str, str]]] | None:
    """Per iteration its collectives as (first, last) unit names; None where no iteration fuses.
    The profile's comm times include alpha (a blocking all-reduce each), so a collective costs
    alpha plus its units' comm less alpha each."""
    if alpha <= 0:
        return None
    bp, comm = arrays(profile)
    ready, bandwidth = np.cumsum(bp), np.maximum(comm - alpha, 0.0)
    names = profile.units
    runs = []
    for t in range(H):
        synced = [i for i, u in enumerate(names) if t in schedule.get(u, ())]
        runs.append([(names[a], names[b]) for a, b in fuse_iteration(ready, bandwidth, synced, alpha)])
    return runs if any(a != b for its in runs for a, b in its) else None
