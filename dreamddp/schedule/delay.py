"""DreamDDP's window when collectives may merge late (``algo.merge_delay``): its plan and its search.

Without a delay every collective an iteration launches during backward must
land by the end of backward (or, with ``overlap_forward``, before its units'
next forward): whatever does not is exposed wait, and no schedule hides a
unit whose gradient is ready last and whose parameters are needed first
(GPT-2's tied embedding).  With ``merge_delay = d`` a collective may instead be
launched after the step, on a copy of the parameters, and merged at the end
of backward d iterations later: it runs behind the next forward and backward.

``window_plans`` states the window in the engine's vocabulary (the engine runs
it, DreamDDP builds its plan with it, and the search below times it with the
simulator, so all three see one plan).  ``plan_delayed`` starts from the
scheduler's own window (any of dreamddp / optimal / general):

1. the split: per iteration, over its collectives in launch order, a run stays
   in place when the FIFO link, carrying what earlier iterations' late traffic
   left on it, finishes it by its deadline; otherwise it goes late (the window
   is walked twice so the carry-over wraps around);
2. a bounded local search on the simulated window (``schedule.simulator``, the
   profile's compute, the link's per-unit times and, where the profile has
   every rank's compute per pass, the ranks' skew, so a collective waited in
   place pays for the slowest rank as it will): toggle a run between in place
   and late, move a unit synced once to another iteration, drop a repeated
   (bubble-filled) sync; improvements only, so the result is never worse than
   the split of the scheduler's window under that model;
3. the cut, before the search and again after it: a late run the link
   cannot carry within its room (merge_delay iterations of compute less the
   step it follows) alone, GPT-2's tied embedding on a slow link, is cut into
   n near-equal parts (n up to ``algo.late_parts``), part k launched k
   iterations after the run's own, each merged merge_delay iterations after
   its launch, when the simulated window gains by it.  Every part is as stale
   as a whole late run; the unit's elements are averaged once per window,
   over n iterations instead of one.  The search leaves a cut run as it is.

A run never goes late when one of its units syncs again before the merge
(the merge would overwrite that average; the other parts of a cut run carry
other elements).  Pure: numpy only.
"""

from __future__ import annotations

import numpy as np

from dreamddp.engine.plan import Payload, Plan, SyncOp, When
from dreamddp.schedule.cost import Run, arrays, forward_slack, step_moved
from dreamddp.schedule.profile import Profile
from dreamddp.schedule.schedule_file import late_part, late_run, resyncs
from dreamddp.schedule.compute import Compute, Skew
from dreamddp.schedule.simulator import simulate_plan

_EPS = 1e-12
MAX_EVALUATIONS = 1000  # bound on the local search's simulated windows
SEARCH_WINDOWS = 2  # windows each candidate is simulated over (the skew is sampled)


def inplace_op(first: int, last: int, overlap_forward: bool) -> SyncOp:
    """A collective averaged in place from its last unit's gradient hook, landing by the end of
    backward, or (overlap_forward) before its input-side unit's next forward, where its units'
    deferred optimizer step follows it (dreamddp_overlap.py)."""
    if overlap_forward:
        return SyncOp(first, last, Payload.PARAM, When.UNIT_READY, When.BEFORE_FORWARD, steps=True)
    return SyncOp(first, last, Payload.PARAM, When.UNIT_READY, When.END_OF_BACKWARD)


def is_late(op: SyncOp) -> bool:
    """A collective of parameters launched after the step: a copy averaged late."""
    return op.payload is Payload.PARAM and op.launch is When.AFTER_STEP


def late_op(first: int, last: int, delay: int, part: tuple[int, int] = (0, 1)) -> SyncOp:
    """A collective launched after the step on a copy, merged at the end of backward ``delay`` later."""
    return SyncOp(first, last, Payload.PARAM, When.AFTER_STEP, When.END_OF_BACKWARD, lag=delay, part=part)


def late_room(iteration_s: float, step_s: float, delay: int) -> float:
    """Seconds a late collective runs behind: from after one step to the end of backward
    ``delay`` iterations later (``iteration_s``: one iteration's compute, its step included)."""
    return delay * iteration_s - step_s


def window_plans(runs: list[list[Run]], late: list[list[tuple]], delay: int, overlap_forward: bool) -> list[Plan]:
    """Each iteration's plan: its runs in place, then its late runs and parts."""
    plans = []
    for its, lates in zip(runs, late):
        gone = {late_run(e) for e in lates}
        ops = [inplace_op(a, b, overlap_forward) for a, b in its if (a, b) not in gone]
        plans.append(tuple(ops) + tuple(late_op(*late_run(e), delay, late_part(e)) for e in lates))
    return plans


def run_seconds(comm: np.ndarray, run: tuple, alpha: float) -> float:
    """One collective over the run (or its part ``(first, last, k, n)``): each unit's measured
    all-reduce includes one alpha, a part carries 1/n of the rest."""
    a, b = late_run(run)
    units = comm[a : b + 1]
    n = int((units > 0).sum())
    whole = float(units.sum()) - alpha * max(0, n - 1)
    parts = late_part(run)[1]
    return whole if parts == 1 or whole <= alpha else alpha + (whole - alpha) / parts


def split_delayed(profile: Profile, H: int, runs: list[list[Run]], delay: int, alpha: float = 0.0,
                  overlap_forward: bool = False) -> list[list[Run]]:
    """Per iteration, the runs that cannot land in place by their deadline (step 1 above)."""
    if delay < 1:
        return [[] for _ in range(H)]
    if not 1 <= delay < H:
        raise ValueError(f"merge_delay={delay}: must be between 1 and H-1={H - 1}")
    bp, comm = arrays(profile)
    fwd = np.array([profile.fwd.get(u, 0.0) for u in profile.units], dtype=float)
    F = max(float(sum(profile.fwd.values())), float(fwd.sum()))
    ready = F + np.cumsum(bp)
    end = F + float(bp.sum())
    step = profile.step_time
    # With overlap_forward an in-place run must land before its input-side unit's next forward,
    # which the steps of the iteration's synced units up to it delay (cost.step_moved).
    slack, moved = forward_slack(profile), step_moved(profile)
    upto = []  # per iteration, per unit: the steps of the iteration's synced units up to it
    for its in runs:
        synced = np.zeros(len(moved))
        for r in its:
            a, b = late_run(r)
            synced[a : b + 1] = 1.0
        upto.append(np.cumsum(moved * synced))

    def deadline(run: Run, h: int) -> float:
        return end + float(slack[run[1]] - upto[h][run[1]]) if overlap_forward else end

    carry = 0.0  # link busy this long into the iteration (earlier iterations' late traffic)
    delayed: list[list[Run]] = [[] for _ in range(H)]
    for lap in range(2):
        for h in range(H):
            link, late = carry, []
            for run in sorted(runs[h], key=lambda r: (ready[r[1]], r[1])):
                finish = max(link, float(ready[run[1]])) + run_seconds(comm, run, alpha)
                if finish <= deadline(run, h) + _EPS or resyncs(runs, h, run, delay):
                    link = finish
                else:
                    late.append(run)
            tail = max(link, end + step) + sum(run_seconds(comm, r, alpha) for r in late)
            carry = max(0.0, tail - (end + step))
            if lap == 1:
                delayed[h] = sorted(late)
    return delayed


def plan_delayed(profile: Profile, H: int, runs: list[list[Run]], delay: int, alpha: float = 0.0,
                 overlap_forward: bool = False, max_parts: int = 1) -> tuple[list[list[Run]], list[list[tuple]]]:
    """(runs, late runs and parts) per iteration: the split of the scheduler's window, improved
    by local search on the simulated window, then the cut of late runs too long for their room
    into at most ``max_parts`` parts (module docstring)."""
    late = split_delayed(profile, H, runs, delay, alpha, overlap_forward)
    if delay < 1:
        return runs, late
    _, comm = arrays(profile)
    compute = Compute(fwd=np.array([profile.fwd.get(u, 0.0) for u in profile.units], dtype=float),
                      bp=arrays(profile)[0], step=profile.step_time,
                      fwd_rest=max(0.0, float(sum(profile.fwd.values())) - sum(profile.fwd.get(u, 0.0) for u in profile.units)))
    seconds = lambda op: run_seconds(comm, (op.first, op.last, *op.part), alpha)  # noqa: E731
    total = float(compute.fwd.sum() + compute.fwd_rest + compute.bp.sum() + compute.step)
    skew = Skew.of(profile.meta.get("compute_by_rank"), total)  # the same draws for every candidate
    world = len(skew.factors) if skew is not None else 1
    budget = [MAX_EVALUATIONS]

    def cost(rs, ls) -> float:
        budget[0] -= 1
        plans = window_plans(rs, ls, delay, overlap_forward)
        return simulate_plan(lambda t: plans[t % H], compute, seconds, H=H, iterations=SEARCH_WINDOWS * H,
                             skew=skew, world=world).mean_iter

    runs = [sorted(its) for its in runs]
    late = [sorted(its) for its in late]
    room = late_room(total, compute.step, delay)
    too_long = lambda r: run_seconds(comm, r, alpha) > room  # noqa: E731
    # cut before the search too: on its sampled skew a whole overlong run can look no better
    # late than in place, and the search would settle it in place, where no cut reaches it
    late, best = _cut(runs, late, delay, max_parts, too_long, cost, cost(runs, late))
    improved = True
    while improved and budget[0] > 0:
        improved = False
        for rs, ls in _moves(runs, late, delay, comm):
            if budget[0] <= 0:
                break
            c = cost(rs, ls)
            if c < best * (1 - 1e-9):
                runs, late, best, improved = rs, ls, c, True
                break
    late, _ = _cut(runs, late, delay, max_parts, too_long, cost, best)
    return runs, late


def _cut(runs: list[list[Run]], late: list[list[tuple]], delay: int, max_parts: int, too_long, cost, best: float):
    """Cut each late run ``too_long`` for its room into the number of parts (2..max_parts, part k
    k iterations after its own) the simulated window gains most by; (late, its cost)."""
    H = len(runs)
    for h in range(H):
        for run in [r for r in late[h] if late_part(r)[1] == 1 and too_long(r)]:
            chosen = None
            for n in range(2, min(max_parts, H) + 1):
                parts = [(*run, k, n) for k in range(n)]
                if any(resyncs(runs, (h + k) % H, p, delay) for k, p in enumerate(parts)):
                    break  # a longer chain reaches the same conflict
                ls = [list(x) for x in late]
                ls[h].remove(run)
                for k, p in enumerate(parts):
                    ls[(h + k) % H] = sorted(ls[(h + k) % H] + [p])
                c = cost(runs, ls)
                if c < best * (1 - 1e-9):
                    chosen, best = ls, c
            if chosen is not None:
                late = chosen
    return late, best


def _moves(runs: list[list[Run]], late: list[list[tuple]], delay: int, comm: np.ndarray):
    """Candidate windows one change away, the likeliest gains first: toggle a run's lateness
    (largest runs first), move a single-unit run to another iteration, drop a repeated sync.
    A run cut into parts stays as it is; no candidate lets a late collective be overwritten."""
    H = len(runs)
    for rs, ls in _candidates(runs, late, delay, comm):
        if not any(resyncs(rs, j, e, delay) for j in range(H) for e in ls[j]):
            yield rs, ls


def _candidates(runs: list[list[Run]], late: list[list[tuple]], delay: int, comm: np.ndarray):
    H = len(runs)
    cut = {((h - late_part(e)[0]) % H, late_run(e)) for h in range(H) for e in late[h] if late_part(e)[1] > 1}
    count: dict[int, int] = {}
    for its in runs:
        for a, b in its:
            for u in range(a, b + 1):
                count[u] = count.get(u, 0) + 1
    by_size = sorted(((h, r) for h in range(H) for r in runs[h] if (h, r) not in cut),
                     key=lambda hr: -float(comm[hr[1][0]:hr[1][1] + 1].sum()))
    for h, run in by_size:
        ls = [list(x) for x in late]
        if run in late[h]:
            ls[h].remove(run)
        elif not resyncs(runs, h, run, delay):
            ls[h] = sorted(ls[h] + [run])
        else:
            continue
        yield runs, ls
    for h, run in by_size:
        a, b = run
        if a != b:
            continue
        if count[a] > 1:  # a repeated sync: drop this one (parts stay while their run stays home)
            rs = [list(x) for x in runs]
            rs[h].remove(run)
            ls = [[e for e in x if late_run(e) in rs[(k - late_part(e)[0]) % H]] for k, x in enumerate(late)]
            yield rs, ls
            continue
        for k in range(1, H):
            g = (h + k) % H
            if any(x <= a <= y for x, y in runs[g]):
                continue
            rs, ls = [list(x) for x in runs], [list(x) for x in late]
            rs[h].remove(run)
            rs[g] = sorted(rs[g] + [run])
            if run in late[h]:
                ls[h].remove(run)
                ls[g] = sorted(ls[g] + [run])
            yield rs, ls
