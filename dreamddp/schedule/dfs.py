"""DreamDDP's scheduler: the paper's depth-first search over contiguous runs.

Units are taken in backward order; iteration g takes a contiguous run starting
where iteration g-1 stopped, and the last iteration takes what is left.
Walking the run under the FIFO cost model (``cost``):

1. optimal hiding: while a unit's all-reduce still finishes before backward
   ends, it joins the current iteration without branching;
2. delayed assignment: at the first unit that cannot be hidden the search
   branches: take it here and pay its overrun, or defer it (and everything
   after it) to the next iteration;
3. at least one unit per iteration: the first unit of an iteration is always
   taken, and a run stops early so every later iteration still gets one.

The result of a branch depends only on (first unit, iteration), because the
link is empty at the start of each iteration, so the search is memoised on
that pair: O(L H) states instead of the authors' 2^min(L-H, H) paths, with the
same answer.  Ties prefer taking the unit (as the authors' search does).
Unlike the authors' code, a unit whose all-reduce frees the link partway
through a later unit's backward is accounted exactly (theirs drops that
partial remainder when it moves to the next unit), so our waits are the true
FIFO waits of the schedule.
"""

from __future__ import annotations

import sys

import numpy as np

from dreamddp.schedule.cost import arrays, deadlines, moved_prefix, overlap_terms, runs_to_schedule
from dreamddp.schedule.profile import Profile


def dfs_cuts(bp: np.ndarray, comm: np.ndarray, H: int, slack: np.ndarray | None = None,
             moved: np.ndarray | None = None) -> tuple[float, list[int]]:
    """(total wait, run boundaries [0, c1, ..., L]) found by the search.  ``slack``: how long
    after the end of backward each unit's average is due (``cost.forward_slack`` with
    overlap_forward; None: at the end of backward, the paper's model), each unit of a run
    s.. due ``moved[s] + ... + moved[k]`` earlier (``cost.step_moved``: the run's own steps);
    "hidden" then means "arrived by its deadline", and a run waits its worst lateness."""
    if H < 1:
        raise ValueError(f"H must be >= 1, got {H}")
    L = len(bp)
    ready = np.cumsum(bp).tolist()
    comm_l = comm.tolist()
    due = deadlines(bp, slack).tolist()
    M = moved_prefix(moved, L).tolist()
    memo: dict[tuple[int, int], tuple[float, int]] = {}  # (s, g) -> (cost, next start)

    def best(s: int, g: int) -> float:
        if s == L:
            return 0.0
        key = (s, g)
        if key in memo:
            return memo[key][0]
        t = 0.0
        if g == H - 1:  # the last iteration takes what is left
            late = 0.0
            for i in range(s, L):
                t = max(t, ready[i]) + comm_l[i]
                if comm_l[i] > 0:
                    late = max(late, t - (due[i] - (M[i + 1] - M[s])))
            memo[key] = (late, L)
            return late
        cap = max(L - (H - 1 - g), s + 1)  # leave one unit for every later iteration
        result = (0.0, L)
        for i in range(s, L):
            if i >= cap:
                result = (best(i, g + 1), i)
                break
            t = max(t, ready[i]) + comm_l[i]
            due_i = due[i] - (M[i + 1] - M[s])
            if comm_l[i] > 0 and t > due_i:
                take = t - due_i + best(i + 1, g + 1)
                if i == s:
                    result = (take, i + 1)
                else:
                    defer = best(i, g + 1)
                    result = (take, i + 1) if take <= defer else (defer, i)
                break
        memo[key] = result
        return result[0]

    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 4 * H + 100))
    try:
        total = best(0, 0)
    finally:
        sys.setrecursionlimit(old)
    cuts, s = [0], 0
    for g in range(H):
        s = memo[(s, g)][1] if (s, g) in memo else L
        cuts.append(s)
    return float(total), cuts


def dreamddp(profile: Profile, H: int, overlap: bool = False) -> dict[str, list[int]]:
    """Schedule unit -> [iteration] found by the DFS (no bubble filling); ``overlap``: with
    each average due at its unit's next forward (``algo.overlap_forward``)."""
    bp, comm = arrays(profile)
    return runs_to_schedule(profile.units, dfs_cuts(bp, comm, H, *overlap_terms(profile, overlap))[1])
