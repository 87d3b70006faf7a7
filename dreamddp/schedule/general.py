"""A scheduler over GENERAL assignments: any subset of units per iteration.

DreamDDP's DFS and ``optimal`` give every iteration one contiguous run of
units.  That wastes the link: an iteration that ends with an input-side unit
(ready late, nothing left to hide behind) would rather sync a few output-side
units (ready early, plenty of backward time left) than the run next to it.

Model (``cost.runs_wait``, alpha-beta FIFO link).  Units with comm == 0 own no
parameters and are never synced; every other unit is synced in at least one
iteration of the H-window.  An iteration's units go out as collectives, each a
contiguous run of unit indices (zero-comm units inside a run ride along for
free) launched when its last unit is ready and costing ``alpha + sum comm``.
Syncing a unit twice never helps (``exact`` proves it), so the search assigns
each synced unit exactly once.  Dropping the zero-comm units leaves M "synced
units" k with ready time r_k (nondecreasing) and comm c_k; a collective is then
a run of consecutive synced units of one iteration, a *job* with release r at
its last unit and length p = alpha + sum c.

Why the search is cheap.  With jobs in release order, an iteration g drains at
``F_g = max_j (r_j + T_g(j))``, T_g(j) = total length of g's jobs from j on,
and its wait is ``max(0, F_g - end of backward)``.  Adding (or removing) a job
at position q shifts every earlier term by +-p and adds (drops) one term, so
the new drain is a max of three numbers read off prefix/suffix maxima kept per
iteration: one numpy expression prices moving ANY job to ANY iteration (an
H x M array) and, with range maxima, swapping any two jobs (M x M); the
alpha > 0 moves (split or merge a collective, move a job next to a job of
another iteration and fuse with it, shift a boundary between adjacent jobs of
two iterations by one unit) are O(M) vectors the same way.  Since the
link is empty at every iteration's start, a move touches at most two
iterations; only their rows are rebuilt (O(M) each), never the whole window.

The search.  Starting points: the best CONTIGUOUS plan under the same model
(``contiguous_plan``: optimal cuts with the best grouping of each run into
collectives) and a greedy that walks units from the input side and gives each
to the iteration whose wait grows least (two tie rules).  Each start descends
(steepest over the moves above, swaps aside); the best then goes through seeded
iterated local search: a few units thrown to random iterations, descend, keep
improvements, and take equal-wait results as the new walk point, since most
iterations hide everything (wait 0) and a local optimum sits on a wide
plateau.  The walk stops early when it meets ``hiding_bound`` (then it is
optimal).  A last descent adds job swaps (M x M pricing, so run once, not per
kick).  Only improvements are ever kept, and the winner is re-evaluated from
scratch and must beat the contiguous plan to replace it, so the result is
never worse than the contiguous optimum; the kick count and seed are fixed,
so the result is reproducible.
"""

from __future__ import annotations

from bisect import bisect_right

import numpy as np

from dreamddp.schedule.cost import Run, arrays, overlap_terms, runs_lateness
from dreamddp.schedule.general_search import NEG_INF, Plan, Search
from dreamddp.schedule.optimal import best_splits, optimal_cuts
from dreamddp.schedule.profile import Profile



def _check(H: int, alpha: float) -> None:
    if H < 1:
        raise ValueError(f"H must be >= 1, got {H}")
    if not (alpha >= 0 and np.isfinite(alpha)):
        raise ValueError(f"alpha must be a finite number >= 0, got {alpha}")


def _fifo_finish(r: np.ndarray, c: np.ndarray, alpha: float, jobs: list[tuple[int, int]]) -> float:
    """Drain time of synced-unit jobs (first, last) on an empty FIFO link."""
    t = 0.0
    for first, last in sorted(jobs, key=lambda j: j[1]):
        t = max(t, float(r[last])) + alpha + float(c[first : last + 1].sum())
    return t


def _plan_wait(r: np.ndarray, c: np.ndarray, alpha: float, end: float, plan: Plan) -> float:
    return float(sum(max(0.0, _fifo_finish(r, c, alpha, jobs) - end) for jobs in plan if jobs))


def _run_drains(r: np.ndarray, c: np.ndarray, alpha: float) -> np.ndarray:
    """``D[s, e]``: best drain time of the run s..e-1 of synced units as one iteration.

    ``D[s, k+1] = min_j max(D[s, j], r_k) + alpha + c[j..k]`` (last collective
    j..k; ``D[s, s] = 0``; inf where e < s): since what follows can only be
    delayed by a later drain, the best prefix is the one that drains first.
    One pass over the (k+1) x (k+1) upper triangle per k prices every start s
    at once: O(M^3 / 6) in numpy, the cost of pricing alpha > 0 exactly.
    """
    M = len(r)
    csum = np.concatenate(([0.0], np.cumsum(c)))
    D = np.full((M, M + 1), np.inf)
    D[np.arange(M), np.arange(M)] = 0.0
    block = 128  # rows s in [a, a + block) only need last-collective starts j >= a: skip the dead triangle
    buf = np.empty((block, M))
    for k in range(M):
        n = k + 1
        size = alpha + csum[n] - csum[:n]  # length of the last collective j..k, by j
        for a in range(0, n, block):
            b = min(a + block, n)
            cand = buf[: b - a, : n - a]
            np.maximum(D[a:b, a:n], r[k], out=cand)
            cand += size[a:]
            cand.min(axis=1, out=D[a:b, n])
    return D


def _group_run(r: np.ndarray, c: np.ndarray, alpha: float, s: int, e: int) -> list[tuple[int, int]]:
    """Collectives of the best grouping of the run s..e-1 (the same DP, one start)."""
    csum = np.concatenate(([0.0], np.cumsum(c[s:e])))
    drain = np.zeros(e - s + 1)  # drain[i]: best drain of the first i units of the run
    first = np.zeros(e - s + 1, dtype=int)
    for i in range(1, e - s + 1):
        cand = np.maximum(drain[:i], r[s + i - 1]) + alpha + csum[i] - csum[:i]
        first[i] = int(np.argmin(cand))
        drain[i] = cand[first[i]]
    jobs, i = [], e - s
    while i > 0:
        jobs.append((s + int(first[i]), s + i - 1))
        i = int(first[i])
    return jobs[::-1]


def contiguous_plan(r: np.ndarray, c: np.ndarray, end: float, H: int, alpha: float) -> Plan:
    """Best plan whose iterations each sync one run of consecutive synced units.

    alpha == 0: one collective per unit is optimal (fusing only delays
    launches), and ``optimal_cuts`` is the exact DP.  alpha > 0: the same DP
    over runs, each run priced with its best grouping into collectives.
    """
    M = len(r)
    if alpha == 0:
        bp = np.diff(np.concatenate(([0.0], r, [end])))  # one trailing comm-free unit keeps the end
        _, cuts = optimal_cuts(bp, np.append(c, 0.0), H)
        cuts = [min(q, M) for q in cuts]
        return [[(k, k) for k in range(cuts[g], cuts[g + 1])] for g in range(H)]
    C = np.full((M + 1, M + 1), np.inf)  # C[s, e]: wait of the run s..e-1
    C[:M] = np.maximum(_run_drains(r, c, alpha) - end, 0.0)
    C[M, M] = 0.0
    _, bounds = best_splits(C, H)
    return [_group_run(r, c, alpha, bounds[g], bounds[g + 1]) for g in range(H)]


def greedy_plan(r: np.ndarray, c: np.ndarray, end: float, H: int, alpha: float, fullest: bool) -> Plan:
    """Walk synced units from the input side; each goes where the wait grows least.

    Walking backwards, an iteration's load is exactly the link time queued
    behind the new unit, so its drain term is ``r_k + load + p_k``.  Ties go to
    the emptiest iteration (or the fullest, a second starting point).
    """
    load = np.zeros(H)
    drain = np.full(H, NEG_INF)
    plan: Plan = [[] for _ in range(H)]
    for k in range(len(r) - 1, -1, -1):
        p = alpha + c[k]
        new = np.maximum(drain, r[k] + load + p)
        grow = np.maximum(new - end, 0.0) - np.maximum(drain - end, 0.0)
        tied = np.flatnonzero(grow <= grow.min() + 1e-15)
        g = int(tied[np.argmax(load[tied])] if fullest else tied[np.argmin(load[tied])])
        drain[g], load[g] = new[g], load[g] + p
        plan[g].insert(0, (k, k))
    return plan


def hiding_bound(r: np.ndarray, c: np.ndarray, end: float) -> float:
    """Least possible total wait of ANY plan: the sum of what each synced unit overruns alone.

    An iteration syncing k1 < k2 < ... still has c_k1 + c_k2 + ... to send
    once unit k1 is ready, so its wait is at least (c_k1 - slack_k1) + c_k2 +
    ... >= the sum of its members' own overruns max(0, c_k - slack_k), whatever
    the grouping (alpha only adds).  A plan that meets it is optimal.
    """
    return float(np.maximum(0.0, c - (end - r)).sum())


def _perturb(state: Search, kicks: int, seed: int, floor: float) -> float:
    """Iterated local search: kick, descend, keep the best; equal-wait results become the new walk point.

    Many iterations hide all their units (wait 0), so a local optimum sits on a
    wide plateau; accepting equal-wait results lets the walk drift across it.
    Stops early at ``floor`` (a lower bound: nothing left to find).  Returns
    the best total and leaves ``state`` at the best plan found.
    """
    rng = np.random.default_rng(seed)
    best = current = state.total()
    best_snap = current_snap = state.snapshot()
    for i in range(kicks):
        if best <= floor + state.tol:
            break
        state.kick(rng, 2 + i % 3)
        state.descend()
        total = state.total()
        if total < best - state.tol:
            best, best_snap = total, state.snapshot()
        if total <= current + state.tol:
            current, current_snap = total, state.snapshot()
        else:
            state.restore(current_snap)
    state.restore(best_snap)
    return best


def checked_arrays(bp, comm, H: int, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """``bp`` and ``comm`` as float arrays, refused unless they describe a window a plan can
    be made for (one length, finite, bp >= 0; H >= 1; alpha finite >= 0)."""
    _check(H, alpha)
    bp, comm = np.asarray(bp, dtype=float), np.asarray(comm, dtype=float)
    if bp.shape != comm.shape or bp.ndim != 1:
        raise ValueError(f"bp and comm must be 1-d arrays of one length, got shapes {bp.shape} and {comm.shape}")
    if not (np.all(np.isfinite(bp)) and np.all(bp >= 0) and np.all(np.isfinite(comm))):
        raise ValueError("bp must be finite and >= 0, comm finite")
    return bp, comm


def general_plan(bp: np.ndarray, comm: np.ndarray, H: int, alpha: float = 0.0, kicks: int = 100,
                 seed: int = 0, slack: np.ndarray | None = None,
                 moved: np.ndarray | None = None) -> tuple[float, list[list[Run]]]:
    """(total wait per window, per iteration its collectives as (first, last) unit indices).

    ``slack``, ``moved`` (``cost.overlap_terms``; ``algo.overlap_forward``): each average is due
    at its unit's next forward and the waits are the worst lateness (``cost.runs_lateness``).
    The search prices waits at the end of backward only, so its plan and the best contiguous
    plan under those deadlines (one collective per unit, as ``optimal``'s) each go through
    ``late_descent`` and the one that waits less is kept: never worse than the contiguous
    optimum under the deadlines the run has."""
    bp, comm = checked_arrays(bp, comm, H, alpha)
    ready = np.cumsum(bp)
    end = float(ready[-1]) if len(ready) else 0.0
    keep = np.flatnonzero(comm > 0)
    if not len(keep):
        return 0.0, [[] for _ in range(H)]
    r, c = ready[keep], comm[keep]
    contiguous = contiguous_plan(r, c, end, H, alpha)
    starts = [contiguous] + [greedy_plan(r, c, end, H, alpha, fullest) for fullest in (False, True)]
    states = [Search(r, c, end, H, alpha, start) for start in starts]
    for state in states:
        state.descend()
    state = min(states, key=Search.total)
    if H > 1:
        _perturb(state, kicks, seed, hiding_bound(r, c, end))
        state.descend(swaps=True)
    best_plan, best_wait = contiguous, _plan_wait(r, c, alpha, end, contiguous)
    found = state.plan()
    wait = _plan_wait(r, c, alpha, end, found)  # exact re-evaluation: only a true gain replaces the baseline
    if wait < best_wait:
        best_plan, best_wait = found, wait
    runs = [sorted((int(keep[f]), int(keep[l])) for f, l in jobs) for jobs in best_plan]
    if slack is None:
        return best_wait, runs
    _, cuts = optimal_cuts(bp, np.where(comm > 0, comm + alpha, 0.0), H, slack, moved)
    contiguous = [[(k, k) for k in range(cuts[g], cuts[g + 1]) if comm[k] > 0] for g in range(H)]
    found = [late_descent(bp, comm, plan, alpha, slack, moved) for plan in (runs, contiguous)]
    return found[1] if found[1][0] < found[0][0] else found[0]


def late_descent(bp: np.ndarray, comm: np.ndarray, plan: list[list[Run]], alpha: float, slack: np.ndarray,
                 moved: np.ndarray | None) -> tuple[float, list[list[Run]]]:
    """Steepest relocations of whole collectives between iterations under the forward deadlines
    (``cost.runs_lateness``), from ``plan``, until none waits less: (total wait, plan), never
    above ``plan``'s.  A plan's own collectives stay as they are (no split or merge), so each
    iteration's runs stay disjoint; a few sweeps of O(collectives x H) evaluations, once per
    schedule."""
    its = [sorted(runs) for runs in plan]
    wait = lambda runs: runs_lateness(bp, comm, runs, alpha, slack, moved)  # noqa: E731
    waits = [wait(runs) for runs in its]
    tol = 1e-12 * (1.0 + sum(waits))
    improved = True
    while improved:
        improved = False
        for g in range(len(its)):
            for job in list(its[g]):
                if waits[g] <= tol:  # taking a job out never makes the rest later, adding one never earlier
                    break
                rest = [j for j in its[g] if j != job]
                left = wait(rest)
                if waits[g] - left <= tol:
                    continue
                joined = [wait([*runs, job]) if h != g else np.inf for h, runs in enumerate(its)]
                gain = [waits[g] + waits[h] - left - joined[h] for h in range(len(its))]
                h = int(np.argmax(gain))
                if gain[h] > tol:
                    its[g], its[h] = rest, sorted([*its[h], job])
                    waits[g], waits[h] = left, joined[h]
                    improved = True
    return float(sum(waits)), its


def general(profile: Profile, H: int, alpha: float = 0.0,
            overlap: bool = False) -> tuple[dict[str, list[int]], list[list[tuple[str, str]]]]:
    """The general plan of ``profile`` as (unit -> sorted iterations, every unit listed, as
    ``dfs.dreamddp`` returns; per iteration its collectives as (first, last) unit names);
    ``overlap``: the run overlaps the averages with the next forward (``algo.overlap_forward``),
    and the plan kept is the one that waits less under those deadlines (``general_plan``).

    ``profile.comm`` holds each unit's bandwidth term here (alpha is charged per collective).
    A unit with comm == 0 owns nothing to sync and costs nothing where it goes
    (on one worker, every unit): it takes the iteration of the collective
    spanning it, else that of the nearest synced unit on the input side (the
    next in backward order), else the output side, else iteration 0, and a
    collective of its own there if none spans it, so that every iteration's
    collectives cover its units (what the engine runs, schedule_file.assign_runs).
    """
    bp, comm = arrays(profile)
    slack, moved = overlap_terms(profile, overlap)
    _, runs = general_plan(bp, comm, H, alpha, slack=slack, moved=moved)
    its: list[set[int]] = [set() for _ in profile.units]
    for g, collectives in enumerate(runs):
        for f, l in collectives:
            for i in range(f, l + 1):
                its[i].add(g)
    synced = [i for i in range(len(its)) if its[i]]
    for i in range(len(its)):
        if not its[i]:
            k = bisect_right(synced, i)
            its[i] = {min(its[synced[k]])} if k < len(synced) else {min(its[synced[-1]])} if synced else {0}
    spanned = {(g, i) for g, collectives in enumerate(runs) for f, l in collectives for i in range(f, l + 1)}
    for i in range(len(its)):
        for g in its[i]:
            if (g, i) not in spanned:
                runs[g] = sorted([*runs[g], (i, i)])
    schedule = {u: sorted(its[i]) for i, u in enumerate(profile.units)}
    return schedule, [[(profile.units[f], profile.units[l]) for f, l in its] for its in runs]
