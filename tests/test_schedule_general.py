"""General-assignment scheduler: exact vs a naive brute force, general vs exact and contiguous, reference gains."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dreamddp.schedule.compare import reference_root
from dreamddp.schedule.cost import arrays, total_wait
from dreamddp.schedule.exact import exact_plan
from dreamddp.schedule.general import general, general_plan
from dreamddp.schedule.optimal import optimal_cuts
from dreamddp.schedule.profile import Profile, load_profile
from dreamddp.schedule.schedule_file import assign_runs


def simulate(bp, comm, runs, alpha):
    """Event-by-event reference, written independently of dreamddp.schedule.cost.

    Walk the backward pass unit by unit; when a unit's gradient is ready, the
    collectives that end at it join the link queue in turn.
    """
    if not runs:
        return 0.0
    closing: dict[int, list[float]] = {}
    for first, last in runs:
        closing.setdefault(last, []).append(alpha + sum(comm[first : last + 1]))
    clock = link_free = 0.0
    for unit, seconds in enumerate(bp):
        clock += seconds
        for size in closing.get(unit, []):
            link_free = max(link_free, clock) + size
    return max(0.0, link_free - clock)


def plan_wait(bp, comm, plan, alpha):
    return sum(simulate(bp, comm, runs, alpha) for runs in plan)


def check_plan(bp, comm, H, plan):
    """H iterations of disjoint in-range runs that cover every unit with comm > 0."""
    assert len(plan) == H
    covered: set[int] = set()
    for runs in plan:
        seen: set[int] = set()
        for first, last in runs:
            assert 0 <= first <= last < len(bp)
            units = set(range(first, last + 1))
            assert not units & seen
            seen |= units
        covered |= seen
    assert {i for i, c in enumerate(comm) if c > 0} <= covered


def groupings(units):
    """Every way to cut a sorted list of units into consecutive groups, as (first, last) runs."""
    for cuts in itertools.product((False, True), repeat=max(len(units) - 1, 0)):
        runs, start = [], 0
        for i, cut in enumerate(cuts, 1):
            if cut:
                runs.append((units[start], units[i - 1]))
                start = i
        runs.append((units[start], units[-1]))
        yield runs


def contiguous_brute_force(bp, comm, H, alpha):
    """Least wait over every split into H contiguous runs, each run grouped into collectives in every way."""
    L = len(bp)
    run_wait = {}
    for s in range(L + 1):
        for e in range(s, L + 1):
            synced = [i for i in range(s, e) if comm[i] > 0]
            run_wait[s, e] = min(simulate(bp, comm, g, alpha) for g in groupings(synced)) if synced else 0.0
    best = np.inf
    for inner in itertools.combinations_with_replacement(range(L + 1), H - 1):
        cuts = (0, *inner, L)
        best = min(best, sum(run_wait[cuts[g], cuts[g + 1]] for g in range(H)))
    return best


def naive_optimum(bp, comm, H, alpha):
    """Fully general brute force: each iteration picks ANY set of disjoint runs of units (zero-comm ones
    included, units may sync in several iterations); least total wait covering every comm > 0 unit."""
    L = len(bp)
    need = sum(1 << i for i in range(L) if comm[i] > 0)
    options = []  # (wait, covered mask) of every set of disjoint runs
    for labels in itertools.product((0, 1, 2), repeat=L):  # 0 off, 1 opens a run, 2 extends the previous run
        if any(lab == 2 and (i == 0 or labels[i - 1] == 0) for i, lab in enumerate(labels)):
            continue
        runs = []
        for i, lab in enumerate(labels):
            if lab == 1:
                runs.append([i, i])
            elif lab == 2:
                runs[-1][1] = i
        mask = sum(1 << i for i, lab in enumerate(labels) if lab)
        options.append((simulate(bp, comm, [tuple(r) for r in runs], alpha), mask))
    best = {0: 0.0}
    for _ in range(H):
        nxt = dict(best)
        for mask, w in best.items():
            for wait, cov in options:
                m = mask | cov
                if w + wait < nxt.get(m, np.inf):
                    nxt[m] = w + wait
        best = nxt
    return min(w for m, w in best.items() if m & need == need)


times = st.floats(min_value=0.0, max_value=10.0, allow_nan=False).map(lambda x: round(x, 3))
comms = st.one_of(st.just(0.0), times)
alphas = st.sampled_from([0.0, 0.0, 0.05, 0.5])


def instances(max_units, max_H):
    return st.integers(1, max_units).flatmap(
        lambda L: st.tuples(
            st.lists(times, min_size=L, max_size=L),
            st.lists(comms, min_size=L, max_size=L),
            st.integers(1, max_H),
            alphas,
        )
    )


def test_minimal_case_general_beats_contiguous():
    bp, comm = np.array([1.0, 1, 1, 1]), np.array([2.0, 2, 1, 0])
    assert optimal_cuts(bp, comm, 2)[0] == pytest.approx(1.0)
    wait, plan = general_plan(bp, comm, 2)
    assert wait == pytest.approx(0.0, abs=1e-12)
    check_plan(bp, comm, 2, plan)
    assert plan_wait(bp, comm, plan, 0.0) == pytest.approx(0.0, abs=1e-12)
    assert exact_plan(bp, comm, 2)[0] == pytest.approx(0.0, abs=1e-12)


@settings(max_examples=150, deadline=None)
@given(instances(5, 3))
def test_exact_equals_naive_brute_force(inst):
    bp, comm, H, alpha = inst
    wait, plan = exact_plan(np.array(bp), np.array(comm), H, alpha)
    check_plan(bp, comm, H, plan)
    assert plan_wait(bp, comm, plan, alpha) == pytest.approx(wait, abs=1e-9)
    assert wait == pytest.approx(naive_optimum(bp, comm, H, alpha), abs=1e-9)


@settings(max_examples=150, deadline=None)
@given(instances(8, 4))
def test_exact_le_general_le_contiguous(inst):
    bp, comm, H, alpha = inst
    bp_a, comm_a = np.array(bp), np.array(comm)
    w_gen, plan = general_plan(bp_a, comm_a, H, alpha)
    check_plan(bp, comm, H, plan)
    assert plan_wait(bp, comm, plan, alpha) == pytest.approx(w_gen, abs=1e-9)
    w_exact, exact = exact_plan(bp_a, comm_a, H, alpha)
    check_plan(bp, comm, H, exact)
    assert plan_wait(bp, comm, exact, alpha) == pytest.approx(w_exact, abs=1e-9)
    w_contig = contiguous_brute_force(bp, comm, H, alpha)
    if alpha == 0:
        assert optimal_cuts(bp_a, comm_a, H)[0] == pytest.approx(w_contig, abs=1e-9)
    assert w_exact <= w_gen + 1e-9
    assert w_gen <= w_contig + 1e-9


def test_general_within_two_percent_of_exact_in_95_percent():
    rng = np.random.default_rng(20260501)
    n, close = 300, 0
    for i in range(n):
        L, H = int(rng.integers(1, 9)), int(rng.integers(1, 5))
        alpha = (0.0, 0.0, 0.05, 0.5)[i % 4]
        bp = np.round(rng.uniform(0, 10, L), 3)
        comm = np.round(rng.uniform(0, 10, L), 3)
        comm[rng.uniform(size=L) < 0.2] = 0.0
        w_gen, _ = general_plan(bp, comm, H, alpha)
        w_exact, _ = exact_plan(bp, comm, H, alpha)
        assert w_exact <= w_gen + 1e-9
        close += w_gen <= 1.02 * w_exact + 1e-9
    assert close >= 0.95 * n


def test_profile_api_names_and_iterations():
    units = [f"u{i}" for i in range(6)]  # backward order
    bp = dict(zip(units, [1.0, 1, 1, 1, 1, 1]))
    comm = dict(zip(units, [2.0, 0, 2, 1, 3, 0.5]))
    profile = Profile(units, bp, comm)
    schedule, runs = general(profile, 3)
    assert list(schedule) == units  # every unit listed, zero-comm ones too (they cost nothing)
    assert all(its == sorted(set(its)) and all(0 <= g < 3 for g in its) for its in schedule.values())
    assert len(runs) == 3
    groups = [[i for i, u in enumerate(units) if g in schedule[u]] for g in range(3)]
    assign_runs(runs, groups, units)  # the engine's check: each iteration's units covered exactly once
    one_worker = Profile(units, bp, dict.fromkeys(units, 0.0))  # nothing to send: still a runnable plan
    schedule1, runs1 = general(one_worker, 3)
    assign_runs(runs1, [[i for i, u in enumerate(units) if g in schedule1[u]] for g in range(3)], units)
    assert all(schedule1[u] for u in units)
    w_gen, _ = general_plan(*arrays(profile), 3)
    assert w_gen <= optimal_cuts(*arrays(profile), 3)[0] + 1e-12
    assert total_wait(profile, 3, schedule) == pytest.approx(w_gen, abs=1e-12)


def _reference(rel: str):
    try:
        root = reference_root()
    except FileNotFoundError:
        pytest.skip("reference profiles not found")
    if not (root / rel).is_dir():
        pytest.skip(f"reference profile {rel} not found")
    return load_profile(root / rel)


def hiding_bound(bp, comm):
    """A lower bound on any plan's total wait (alpha >= 0): the sum of what each unit overruns alone.

    If an iteration syncs units k1 < k2 < ..., the link still has c_k1 + c_k2 + ...
    to send after unit k1 is ready, so its wait is at least
    (c_k1 - slack_k1) + c_k2 + ... >= the sum of every member's own overrun
    max(0, c_k - slack_k), slack_k = backward time left after unit k is ready.
    """
    ready = np.cumsum(bp)
    return float(np.maximum(0.0, np.asarray(comm) - (ready[-1] - ready)).sum())


# (profile, claimed reduction vs the contiguous optimum at H=10, alpha=0, least reduction asserted).
# Where the floor is below the claim, the claim is the reached reduction rounded up: for H100 GPT-2
# and Qwen the reached wait equals hiding_bound (test below), so no plan of any kind reaches the claim;
# for the other three, 2,000 perturbations x 4 seeds find nothing better (and, for H100 Llama-2, neither
# does a HiGHS MIP in 600 s), but they are not proven optimal.
CLAIMS = [
    ("paper-v1/A6000/gpt2", 0.21, 0.21),
    ("paper-v1/A6000/resnet50", 0.21, 0.21),
    ("paper-v1/H100/gpt2", 0.23, 0.2285),  # optimum 22.886%: equals hiding_bound, so 23% is impossible
    ("paper-v1/H100/llama2", 0.14, 0.137),  # 13.74% (HiGHS MIP finds no better)
    ("paper-v1/A6000/llama2", 0.11, 0.106),  # 10.63%
    ("artifact/gpt2/16/5gbit", 0.12, 0.116),  # 11.65%
    ("artifact/llama2-124M/16/10gbit", 0.08, 0.08),
    ("artifact/Qwen2.5-7B/16/1gbit", 0.39, 0.3885),  # optimum 38.868%: equals hiding_bound, so 39% is impossible
]


@pytest.mark.parametrize("rel,claimed,floor", CLAIMS, ids=[c[0] for c in CLAIMS])
def test_reference_gain_over_contiguous(rel, claimed, floor):
    bp, comm = arrays(_reference(rel))
    w_contig = optimal_cuts(bp, comm, 10)[0]
    w_gen, plan = general_plan(bp, comm, 10)
    check_plan(bp, comm, 10, plan)
    assert plan_wait(bp, comm, plan, 0.0) == pytest.approx(w_gen, rel=1e-9)
    assert hiding_bound(bp, comm) <= w_gen + 1e-12
    assert w_gen <= (1 - floor) * w_contig, f"claimed {claimed:.0%}, asserted {floor:.2%}"


@pytest.mark.parametrize("rel", ["paper-v1/H100/gpt2", "artifact/Qwen2.5-7B/16/1gbit"])
def test_reference_optimum_certified_by_hiding_bound(rel):
    bp, comm = arrays(_reference(rel))
    w_gen, _ = general_plan(bp, comm, 10)
    assert w_gen == pytest.approx(hiding_bound(bp, comm), rel=1e-9)


@settings(max_examples=100, deadline=None)
@given(instances(6, 4))
def test_hiding_bound_is_a_lower_bound(inst):
    bp, comm, H, alpha = inst
    assert hiding_bound(bp, comm) <= exact_plan(np.array(bp), np.array(comm), H, alpha)[0] + 1e-9


@pytest.mark.parametrize("solver", [general_plan, exact_plan])
def test_bad_arguments_raise(solver):
    with pytest.raises(ValueError):
        solver(np.ones(3), np.ones(3), 0)
    with pytest.raises(ValueError):
        solver(np.ones(3), np.ones(3), 2, alpha=-1.0)
    with pytest.raises(ValueError):
        solver(np.ones(3), np.ones(2), 2)
    with pytest.raises(ValueError):
        solver(np.array([1.0, -1.0]), np.ones(2), 2)


@pytest.mark.parametrize("solver", [general_plan, exact_plan])
def test_nothing_to_sync_and_more_iterations_than_units(solver):
    assert solver(np.ones(3), np.zeros(3), 2) == (0.0, [[], []])
    wait, plan = solver(np.array([1.0, 1.0]), np.array([5.0, 5.0]), 4)
    check_plan([1.0, 1.0], [5.0, 5.0], 4, plan)
    assert wait == pytest.approx(plan_wait([1.0, 1.0], [5.0, 5.0], plan, 0.0))
    assert wait == pytest.approx(4.0 + 5.0)  # each unit alone: overruns 5 - 1 and 5 - 0
