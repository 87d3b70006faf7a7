"""Exact optimum vs brute force, DFS vs optimum, ENP sizes, bubble safety."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dreamddp.schedule.bubble import bubble_fill
from dreamddp.schedule.cost import run_costs, window_waits
from dreamddp.schedule.dfs import dfs_cuts
from dreamddp.schedule.authors_model import authors_enp as enp, authors_enp_sizes as enp_sizes
from dreamddp.schedule.optimal import optimal_cuts
from dreamddp.schedule.profile import Profile


def fifo_wait(bp, comm, members):
    """Event-by-event reference, written independently of dreamddp.schedule.cost."""
    clock, link, ready = 0.0, 0.0, {}
    for i, t in enumerate(bp):
        clock += t
        ready[i] = clock
    for i in sorted(members):
        link = max(link, ready[i]) + comm[i]
    return max(0.0, link - clock)


def brute_force(bp, comm, H):
    """Least total wait over every split into H contiguous (possibly empty) runs."""
    L = len(bp)
    best = np.inf
    for inner in itertools.combinations_with_replacement(range(L + 1), H - 1):
        cuts = (0, *inner, L)
        best = min(best, sum(fifo_wait(bp, comm, range(cuts[g], cuts[g + 1])) for g in range(H)))
    return best


times = st.floats(min_value=0.0, max_value=10.0, allow_nan=False).map(lambda x: round(x, 3))
instances = st.integers(1, 8).flatmap(
    lambda L: st.tuples(st.lists(times, min_size=L, max_size=L), st.lists(times, min_size=L, max_size=L), st.integers(1, 4))
)


def _cut_wait(bp, comm, cuts):
    return sum(fifo_wait(bp, comm, range(cuts[g], cuts[g + 1])) for g in range(len(cuts) - 1))


@settings(max_examples=300, deadline=None)
@given(instances)
def test_optimal_equals_brute_force_and_dfs_never_beats_it(inst):
    bp, comm, H = inst
    bp_a, comm_a = np.array(bp), np.array(comm)
    w_opt, cuts = optimal_cuts(bp_a, comm_a, H)
    assert w_opt == pytest.approx(brute_force(bp, comm, H), abs=1e-9)
    assert _cut_wait(bp, comm, cuts) == pytest.approx(w_opt, abs=1e-9)
    assert len(cuts) == H + 1 and cuts[0] == 0 and cuts[-1] == len(bp)
    if len(bp) >= H:  # non-empty runs whenever possible
        assert all(a < b for a, b in zip(cuts, cuts[1:]))
    w_dfs, dcuts = dfs_cuts(bp_a, comm_a, H)
    assert _cut_wait(bp, comm, dcuts) == pytest.approx(w_dfs, abs=1e-9)
    assert w_dfs >= w_opt - 1e-9
    if len(bp) >= H:  # property 3: at least one unit per iteration
        assert all(a < b for a, b in zip(dcuts, dcuts[1:]))


@settings(max_examples=150, deadline=None)
@given(instances)
def test_bubble_fill_never_increases_an_iterations_wait(inst):
    bp, comm, H = inst
    units = [f"u{i}" for i in range(len(bp))]
    p = Profile(units, dict(zip(units, bp)), dict(zip(units, comm)), {}, {})
    _, cuts = dfs_cuts(np.array(bp), np.array(comm), H)
    plain = {units[i]: [g] for g in range(H) for i in range(cuts[g], cuts[g + 1])}
    filled = bubble_fill(p, H, plain)
    for a, b in zip(window_waits(p, H, filled), window_waits(p, H, plain)):
        assert a <= b + 1e-9
    assert all(set(plain[u]) <= set(filled[u]) for u in units)


@settings(max_examples=100, deadline=None)
@given(instances)
def test_run_costs_match_reference(inst):
    bp, comm, _ = inst
    C = run_costs(np.array(bp), np.array(comm))
    for s in range(len(bp)):
        for e in range(s + 1, len(bp) + 1):
            assert C[s, e] == pytest.approx(fifo_wait(bp, comm, range(s, e)), abs=1e-9)


@pytest.mark.parametrize(
    "L,H,sizes",
    [
        (125, 10, [13] * 9 + [8]),  # GPT-2 leaves: ceil(125/10) = 13, the last chunk short
        (91, 10, [10] * 9 + [1]),  # Llama2-124M
        (12, 10, [2] * 6 + [0] * 4),  # ceil leaves trailing iterations empty
        (20, 5, [4] * 5),
        (3, 5, [1, 1, 1, 0, 0]),
    ],
)
def test_enp_group_sizes(L, H, sizes):
    assert enp_sizes(L, H) == sizes
    units = [f"u{i}" for i in range(L)]
    sched = enp(units, H)
    assert [sum(1 for u in units if sched[u] == [g]) for g in range(H)] == sizes
    assert [sched[u][0] for u in units] == sorted(sched[u][0] for u in units)  # contiguous, output side first


def test_dfs_hand_example():
    # backward order: ready at 1, 3, 6; comm 4, 1, 2; end of backward 6.
    # Iteration 0 hides units 0 and 1 (finish 5 then 6 <= 6); unit 2 is left
    # for the last iteration, where it finishes at 8: total wait 2.
    w, cuts = dfs_cuts(np.array([1.0, 2.0, 3.0]), np.array([4.0, 1.0, 2.0]), 2)
    assert (w, cuts) == (2.0, [0, 2, 3])
    assert optimal_cuts(np.array([1.0, 2.0, 3.0]), np.array([4.0, 1.0, 2.0]), 2)[0] == 2.0


# With overlap_forward each average is due at its unit's next forward pre-hook, ``slack`` after
# the end of backward; slack shrinks toward the input side (those units run first in forward).
def overlap_wait(bp, comm, slack, members):
    """Event-by-event reference with per-unit deadlines: walk the units in forward order (input side
    first), wait at each one's pre-hook for its average, shifting every later pre-hook by the wait."""
    clock, ready = 0.0, {}
    for i, t in enumerate(bp):
        clock += t
        ready[i] = clock
    link, finish = 0.0, {}
    for i in sorted(members):
        link = max(link, ready[i]) + comm[i]
        finish[i] = link
    waited = 0.0
    for i in sorted(finish, reverse=True):  # forward order
        if comm[i] > 0:
            waited = max(waited, finish[i] - (clock + slack[i]))
    return waited


overlap_instances = st.integers(1, 7).flatmap(
    lambda L: st.tuples(st.lists(times, min_size=L, max_size=L), st.lists(times, min_size=L, max_size=L),
                        st.lists(times, min_size=L, max_size=L), st.integers(1, 4)))


def as_slack(fwd):
    """step 0.5, then the forward of the units before each one in forward order."""
    fwd = np.array(fwd)
    return 0.5 + np.cumsum(fwd[::-1])[::-1] - fwd


@settings(max_examples=100, deadline=None)
@given(overlap_instances)
def test_overlap_run_costs_dfs_and_optimum_against_brute_force(inst):
    bp, comm, fwd, H = inst
    slack = as_slack(fwd)
    C = run_costs(np.array(bp), np.array(comm), slack)
    for s in range(len(bp)):
        for e in range(s + 1, len(bp) + 1):
            assert C[s, e] == pytest.approx(overlap_wait(bp, comm, slack, range(s, e)), abs=1e-9)
    L = len(bp)
    best = min(sum(overlap_wait(bp, comm, slack, range(c[g], c[g + 1])) for g in range(H))
               for inner in itertools.combinations_with_replacement(range(L + 1), H - 1) for c in [(0, *inner, L)])
    w_opt, cuts = optimal_cuts(np.array(bp), np.array(comm), H, slack)
    assert w_opt == pytest.approx(best, abs=1e-9)
    assert sum(overlap_wait(bp, comm, slack, range(cuts[g], cuts[g + 1])) for g in range(H)) == pytest.approx(w_opt, abs=1e-9)
    w_dfs, cuts = dfs_cuts(np.array(bp), np.array(comm), H, slack)
    assert w_dfs >= w_opt - 1e-9  # the paper's search on the overlap model: never below the optimum
    assert sum(overlap_wait(bp, comm, slack, range(cuts[g], cuts[g + 1])) for g in range(H)) == pytest.approx(w_dfs, abs=1e-9)


@settings(max_examples=100, deadline=None)
@given(instances)
def test_zero_slack_is_the_papers_model_bit_for_bit(inst):
    bp, comm, H = inst
    bp, comm = np.array(bp), np.array(comm)
    assert dfs_cuts(bp, comm, H, np.zeros(len(bp))) == dfs_cuts(bp, comm, H)
    assert optimal_cuts(bp, comm, H, np.zeros(len(bp))) == optimal_cuts(bp, comm, H)


@settings(max_examples=60, deadline=None)
@given(instances, st.floats(0.0, 2.0))
def test_overlapped_bubble_fill_never_slows_the_window_the_simulator_times(inst, step):
    """With overlap_forward the extras' averages are due at their next forward and their own
    steps leave the step for it (SyncOp.steps): the filled plan, timed by the simulator (an
    independent walk of the engine's points), never takes longer than the plan it fills."""
    from dreamddp.prediction import simulate

    bp, comm, H = inst
    units = [f"u{i}" for i in range(len(bp))]
    p = Profile(units, dict(zip(units, bp)), dict(zip(units, comm)), {u: b / 2 for u, b in zip(units, bp)}, {},
                step_time=step)
    _, cuts = dfs_cuts(np.array(bp), np.array(comm), H)
    plain = {units[i]: [g] for g in range(H) for i in range(cuts[g], cuts[g + 1])}
    filled = bubble_fill(p, H, plain, overlap=True)
    timed = lambda s: simulate("dreamddp", p, H=H, schedule=s, overlap_forward=True, iterations=2 * H).mean_iter  # noqa: E731
    assert timed(filled) <= timed(plain) + 1e-9
    assert all(set(plain[u]) <= set(filled[u]) for u in units)
