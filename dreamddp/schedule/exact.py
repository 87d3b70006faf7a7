"""Exact optimum over GENERAL assignments for small instances (the check on ``general``).

The model is ``general``'s: every unit with comm > 0 is synced in at least one
iteration of the H-window; an iteration sends collectives, each a contiguous
run of unit indices launched when its last unit is ready and costing
``alpha + sum comm`` on a FIFO link that is empty at the iteration's start;
minimise the total exposed wait.  Three facts shrink the search space without
losing the optimum:

1. Zero-comm units never need syncing and only matter as filler: a run may
   span them at no cost, and a run that ENDS on one launches later than the
   run cut back to its last synced unit.  So the instance reduces to the M
   synced units (their ready times kept), and a collective is a run of
   consecutive synced units.
2. Syncing a unit more than once never helps.  Take a unit covered by runs A
   (iteration a) and B (iteration b), a != b.  If A lies inside B, delete A: a
   FIFO link never drains later with a job removed, and B still covers A's
   units.  Otherwise the two runs overlap partially, say A starts first and B
   ends last; cut B's front back to just after A's end: B still launches when
   its last unit is ready and now carries less, so b drains no later, and the
   cut units stay covered by A.  Each step lowers the total coverage and never
   raises the wait, so some optimum syncs every unit exactly once.
3. The iterations are interchangeable (each starts with an empty link and the
   same backward pass), so only the partition of the synced units into at
   most H blocks matters, not which iteration gets which block.

A block's best grouping into collectives is a DP over its sorted units: the
best way to send a prefix is the one that drains first, since what follows
can only be delayed by a later drain.  The partition is a DP over subsets:
``best[h][S] = min cost(B) + best[h-1][S - B]`` over blocks B holding S's
lowest unit, O(H 3^M) with the block costs memoised (M <= 12 here).
"""

from __future__ import annotations

import numpy as np

from dreamddp.schedule.general import checked_arrays
from dreamddp.schedule.cost import Run

MAX_SYNCED_UNITS = 12


def _block(r: np.ndarray, c: np.ndarray, alpha: float, units: list[int]) -> tuple[float, list[tuple[int, int]]]:
    """Least drain time of the synced units ``units`` as one iteration, and its collectives."""
    n = len(units)
    drain = [0.0] * (n + 1)  # drain[i]: best drain of the first i units
    first = [0] * (n + 1)  # where the last collective of that prefix starts
    for i in range(1, n + 1):
        last = units[i - 1]
        best, load = np.inf, alpha
        for j in range(i, 0, -1):  # last collective = units[j-1 .. i-1]
            if j < i and units[j] != units[j - 1] + 1:
                break  # not consecutive synced units: cannot share a collective
            load += c[units[j - 1]]
            t = max(drain[j - 1], float(r[last])) + load
            if t < best:
                best, first[i] = t, j
        drain[i] = best
    jobs, i = [], n
    while i > 0:
        j = first[i]
        jobs.append((units[j - 1], units[i - 1]))
        i = j - 1
    return drain[n], jobs[::-1]


def exact_plan(bp: np.ndarray, comm: np.ndarray, H: int, alpha: float = 0.0) -> tuple[float, list[list[Run]]]:
    """(least total wait per window, per iteration its collectives as (first, last) unit indices)."""
    bp, comm = checked_arrays(bp, comm, H, alpha)
    ready = np.cumsum(bp)
    end = float(ready[-1]) if len(ready) else 0.0
    keep = np.flatnonzero(comm > 0)
    M = len(keep)
    if M > MAX_SYNCED_UNITS:
        raise ValueError(f"exact_plan: {M} synced units; at most {MAX_SYNCED_UNITS} (the search is 3^M)")
    r, c = ready[keep], comm[keep]
    full = (1 << M) - 1
    cost = np.zeros(full + 1)
    jobs: list[list[tuple[int, int]]] = [[] for _ in range(full + 1)]
    for S in range(1, full + 1):
        drain, jobs[S] = _block(r, c, alpha, [k for k in range(M) if S >> k & 1])
        cost[S] = max(0.0, drain - end)
    best = np.full(full + 1, np.inf)
    best[0] = 0.0
    choice = np.zeros((H + 1, full + 1), dtype=int)
    for h in range(1, H + 1):
        new = best.copy()  # an iteration may stay empty
        for S in range(1, full + 1):
            low = S & -S
            rest = S ^ low
            B = rest
            while True:  # blocks B | low, B over the subsets of rest
                block = B | low
                t = cost[block] + best[S ^ block]
                if t < new[S]:
                    new[S], choice[h, S] = t, block
                if B == 0:
                    break
                B = (B - 1) & rest
        best = new
    plan: list[list[Run]] = []
    S = full
    for h in range(H, 0, -1):
        block = int(choice[h, S])
        plan.append(sorted((int(keep[f]), int(keep[l])) for f, l in jobs[block]) if block else [])
        S ^= block
    return float(best[full]), plan
