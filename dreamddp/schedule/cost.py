"""The per-iteration cost model every scheduler optimises (paper section 1).

Within one iteration, unit i (backward order) has its gradient ready at
``ready[i] = bp[0] + ... + bp[i]`` (time from the start of backward).  Each unit
synced in that iteration launches its all-reduce at ``ready[i]`` onto a FIFO
link; the exposed wait is ``max(0, last finish - ready[-1])``.  The link is
empty at the start of every iteration (the step waits for it), so the cost of
an iteration depends only on the set of units it syncs.

With ``algo.overlap_forward`` a unit's average is due at its next forward
pre-hook instead (``forward_slack`` after the end of backward, the link still
empty before the next backward), and the wait is the run's worst lateness.
The synced units' own optimizer steps wait for their averages (SyncOp.steps):
they leave the step and run at the units' pre-hooks, input side first, so a
unit k of the run s..e-1 is due ``moved[s] + ... + moved[k]`` earlier than its
slack says (``step_moved``: each unit's share of the optimizer step).

For a contiguous run s..e-1 the FIFO finish has a closed form,
``finish = P[e] + max_{s<=k<e} (ready[k] - P[k])`` with ``P`` the prefix sum of
comm times, which lets one numpy running maximum price every run starting at s.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from dreamddp.schedule.profile import Profile


def arrays(profile: Profile) -> tuple[np.ndarray, np.ndarray]:
    """Backward and comm seconds as arrays in backward order (missing comm = 0)."""
    bp = np.array([profile.bp.get(u, 0.0) for u in profile.units], dtype=float)
    comm = np.array([profile.comm.get(u, 0.0) for u in profile.units], dtype=float)
    return bp, comm


def fifo_finish(ready: np.ndarray, comm: np.ndarray, idx: Iterable[int]) -> float:
    """Time the FIFO link drains when the units ``idx`` launch at their ready times."""
    t = 0.0
    for i in sorted(idx):
        t = max(t, ready[i]) + comm[i]
    return t


def exposed_wait(bp: np.ndarray, comm: np.ndarray, idx: Iterable[int]) -> float:
    """Exposed wait of one iteration that syncs the units ``idx``."""
    ready = np.cumsum(bp)
    end = float(ready[-1]) if len(ready) else 0.0
    return max(0.0, fifo_finish(ready, comm, idx) - end)


def run_costs(bp: np.ndarray, comm: np.ndarray, slack: np.ndarray | None = None,
              moved: np.ndarray | None = None) -> np.ndarray:
    """``C[s, e]`` = exposed wait of an iteration syncing the run s..e-1 (e > s).  ``slack``: how
    long after the end of backward each unit's average is due (None: at the end; with
    ``algo.overlap_forward``, ``forward_slack``); ``moved``: each unit's share of the step, which
    the run's units take out of it to their pre-hooks (``step_moved``; None: none).  A wait
    shifts every later deadline with it, so the run waits its worst lateness,
    ``max_k finish_k - deadline_k`` over the units with something to send."""
    L = len(bp)
    ready, deadline = np.cumsum(bp), deadlines(bp, slack)
    M = moved_prefix(moved, L)
    P = np.concatenate(([0.0], np.cumsum(comm)))
    lead = ready - P[:-1]
    sends = np.asarray(comm) > 0
    C = np.zeros((L + 1, L + 1))
    for s in range(L):
        finish = P[s + 1 :] + np.maximum.accumulate(lead[s:])
        late = np.where(sends[s:], finish - (deadline[s:] - (M[s + 1 :] - M[s])), 0.0)
        C[s, s + 1 :] = np.maximum(0.0, np.maximum.accumulate(late))
    return C


def forward_slack(profile: Profile) -> np.ndarray:
    """Seconds from the end of backward to each unit's next forward pre-hook (backward order):
    the step, the forward of what is not a unit (it runs first), and the units before it in
    forward order (the input side first).  Where a unit's average is due with
    ``algo.overlap_forward``, once the synced units' own steps up to it, which leave the step
    for their pre-hooks and depend on the run, are taken off (``step_moved``)."""
    fwd = np.array([profile.fwd.get(u, 0.0) for u in profile.units], dtype=float)
    rest = max(0.0, float(sum(profile.fwd.values())) - float(fwd.sum()))
    before = np.cumsum(fwd[::-1])[::-1] - fwd  # the units of higher index run first in forward
    return profile.step_time + rest + before


def step_shares(profile: Profile) -> np.ndarray:
    """Each unit's share of the optimizer step (backward order): its bytes' share (an element-wise
    optimizer's work), else equal over the units that sync."""
    if profile.nbytes:
        weight = np.array([profile.nbytes.get(u, 0) for u in profile.units], dtype=float)
    else:
        weight = np.array([profile.comm.get(u, 0.0) > 0 for u in profile.units], dtype=float)
    return weight / weight.sum() if weight.sum() > 0 else weight


def step_moved(profile: Profile) -> np.ndarray:
    """Seconds of the optimizer step each unit's own step takes (backward order): what a unit
    synced with ``algo.overlap_forward`` moves from the step to its next forward pre-hook."""
    return profile.optimizer_seconds * step_shares(profile)


def moved_prefix(moved: np.ndarray | None, n: int) -> np.ndarray:
    """``M[k]`` = moved[0] + ... + moved[k-1] (zeros for None): unit k of a run s.. is due
    ``M[k + 1] - M[s]`` earlier."""
    return np.zeros(n + 1) if moved is None else np.concatenate(([0.0], np.cumsum(moved)))


def overlap_terms(profile: Profile, overlap: bool) -> tuple[np.ndarray | None, np.ndarray | None]:
    """``(slack, moved)`` for ``run_costs`` and the searches on it: with ``overlap``
    (``algo.overlap_forward``), ``forward_slack`` and ``step_moved``; without, every average due
    at the end of backward and no step moved."""
    return (forward_slack(profile), step_moved(profile)) if overlap else (None, None)


def deadlines(bp: np.ndarray, slack: np.ndarray | None) -> np.ndarray:
    """Each unit's deadline from the start of backward: the end of backward, plus ``slack``."""
    end = float(np.cumsum(bp)[-1]) if len(bp) else 0.0  # as ``ready[-1]``, to the last bit
    return np.full(len(bp), end) if slack is None else end + np.asarray(slack, dtype=float)


def groups(profile: Profile, H: int, schedule: dict[str, list[int]]) -> list[list[int]]:
    """Backward-order unit indices synced in each iteration 0..H-1 of a window."""
    index = {u: i for i, u in enumerate(profile.units)}
    out: list[list[int]] = [[] for _ in range(H)]
    for unit, its in schedule.items():
        if unit not in index:
            raise ValueError(f"schedule names unit {unit!r} that the profile does not have")
        for it in its:
            if not 0 <= it < H:
                raise ValueError(f"schedule: unit {unit!r} iteration {it} outside [0, {H})")
            out[it].append(index[unit])
    return [sorted(set(g)) for g in out]


def window_waits(profile: Profile, H: int, schedule: dict[str, list[int]]) -> list[float]:
    """Exposed wait of each iteration of one H-window under the cost model."""
    bp, comm = arrays(profile)
    return [exposed_wait(bp, comm, g) for g in groups(profile, H, schedule)]


def total_wait(profile: Profile, H: int, schedule: dict[str, list[int]]) -> float:
    """Total exposed wait per H-window: what DreamDDP's scheduler minimises."""
    return float(sum(window_waits(profile, H, schedule)))


Run = tuple[int, int]  # one collective: units first..last (inclusive, backward order), one flat slice


def runs_finish(ready: np.ndarray, comm: np.ndarray, runs: Iterable[Run], alpha: float = 0.0) -> float:
    """When the FIFO link drains if each run is ONE collective launched when its last unit is ready.

    Alpha-beta: a collective costs ``alpha`` (per-collective latency) plus the
    sum of its units' bandwidth terms ``comm``; collectives queue in launch
    order (ties: lower unit index first).
    """
    return max((finish for _, finish in fifo_runs(ready, comm, runs, alpha)), default=0.0)


def fifo_runs(ready: np.ndarray, comm: np.ndarray, runs: Iterable[Run], alpha: float = 0.0):
    """Each run, as ONE collective launched when its last unit is ready, with the time the FIFO
    link finishes it, in launch order (``runs_finish``'s model)."""
    t = 0.0
    for first, last in sorted(runs, key=lambda r: (ready[r[1]], r[1])):
        t = max(t, float(ready[last])) + alpha + float(comm[first : last + 1].sum())
        yield (first, last), t


def runs_wait(bp: np.ndarray, comm: np.ndarray, runs: Iterable[Run], alpha: float = 0.0) -> float:
    """Exposed wait of one iteration whose collectives are ``runs`` (alpha-beta FIFO link)."""
    ready = np.cumsum(bp)
    end = float(ready[-1]) if len(ready) else 0.0
    runs = list(runs)
    return max(0.0, runs_finish(ready, comm, runs, alpha) - end) if runs else 0.0


def runs_lateness(bp: np.ndarray, comm: np.ndarray, runs: Iterable[Run], alpha: float = 0.0,
                  slack: np.ndarray | None = None, moved: np.ndarray | None = None) -> float:
    """Exposed wait of one iteration whose collectives are ``runs`` when each unit's average is
    due ``slack`` after the end of backward, earlier by the moved steps of the iteration's synced
    units up to it (``run_costs``' model, for any runs): the worst lateness over the units with
    something to send, at least 0.  With ``slack`` and ``moved`` None, ``runs_wait`` for runs that
    send something."""
    runs = list(runs)
    synced = np.zeros(len(bp), dtype=bool)
    for first, last in runs:
        synced[first : last + 1] = True
    due = deadlines(bp, slack) - (0.0 if moved is None else np.cumsum(np.where(synced, moved, 0.0)))
    late = 0.0
    for (first, last), finish in fifo_runs(np.cumsum(bp), comm, runs, alpha):
        sends = comm[first : last + 1] > 0
        if sends.any():
            late = max(late, finish - float(due[first : last + 1][sends].min()))
    return late


def per_unit_runs(units: Iterable[int]) -> list[Run]:
    """One collective per unit (each launched from its own gradient-ready hook)."""
    return [(u, u) for u in sorted(set(units))]


def runs_to_schedule(units: list[str], cuts: list[int]) -> dict[str, list[int]]:
    """Schedule from run boundaries: iteration g takes units cuts[g]..cuts[g+1]-1."""
    out: dict[str, list[int]] = {}
    for g in range(len(cuts) - 1):
        for i in range(cuts[g], cuts[g + 1]):
            out[units[i]] = [g]
    return out
