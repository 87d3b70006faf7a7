"""Exact minimiser of the total exposed wait per H-window over contiguous runs.

The link is empty at the start of every iteration, so an iteration's wait
depends only on its own run of units (``cost.run_costs``), and the best split
of units 0..e-1 into g runs is ``F[g][e] = min_s F[g-1][s] + C[s, e]``: an
O(H L^2) dynamic programme, one numpy minimum per (g, e) row.  Runs are
non-empty when L >= H; since splitting a run never increases the wait (the
FIFO wait is superadditive over a split), that is also the optimum over splits
into at most H runs.  With L < H each unit gets its own iteration (provably
optimal by the same argument) and the last H - L iterations are empty.
"""

from __future__ import annotations

import numpy as np

from dreamddp.schedule.cost import arrays, overlap_terms, run_costs, runs_to_schedule
from dreamddp.schedule.profile import Profile


def optimal_cuts(bp: np.ndarray, comm: np.ndarray, H: int, slack: np.ndarray | None = None,
                 moved: np.ndarray | None = None) -> tuple[float, list[int]]:
    """(least total wait, run boundaries [0, c1, ..., L]) for H iterations; ``slack``: how long
    after the end of backward each unit's average is due, ``moved``: the steps the run's units
    take out of the step (``cost.run_costs``)."""
    if H < 1:
        raise ValueError(f"H must be >= 1, got {H}")
    L = len(bp)
    C = run_costs(bp, comm, slack, moved)
    if L < H:
        cuts = list(range(L + 1)) + [L] * (H - L)
        return float(sum(C[i, i + 1] for i in range(L))), cuts
    C[np.tril_indices(L + 1)] = np.inf  # runs s..e-1 need s < e
    return best_splits(C, H)


def best_splits(C: np.ndarray, H: int) -> tuple[float, list[int]]:
    """Least-cost cut of items 0..L-1 into H consecutive runs, ``C[s, e]`` the cost of the
    run s..e-1 (inf where not allowed): ``F[g][e] = min_s F[g-1][s] + C[s, e]``, one numpy
    minimum per iteration.  Returns (cost, boundaries [0, c1, ..., L])."""
    L = C.shape[0] - 1
    F = np.full(L + 1, np.inf)
    F[0] = 0.0
    choice = np.zeros((H + 1, L + 1), dtype=int)
    for g in range(1, H + 1):
        total = F[:, None] + C
        choice[g] = np.argmin(total, axis=0)
        F = total[choice[g], np.arange(L + 1)]
    cuts = [L]
    for g in range(H, 0, -1):
        cuts.append(int(choice[g][cuts[-1]]))
    return float(F[L]), cuts[::-1]


def optimal(profile: Profile, H: int, overlap: bool = False) -> dict[str, list[int]]:
    """Schedule unit -> [iteration] with the least total exposed wait; ``overlap``: with each
    average due at its unit's next forward (``algo.overlap_forward``)."""
    bp, comm = arrays(profile)
    return runs_to_schedule(profile.units, optimal_cuts(bp, comm, H, *overlap_terms(profile, overlap))[1])
