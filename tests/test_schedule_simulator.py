"""Simulator of our engine: exact values on a hand-made 3-unit profile.

Forward order a, b, c (so backward c, b, a).  Forward 0.5 s, step 0.25 s.
Backward c=1, b=2, a=3: gradients ready at 1.5, 3.5, 6.5 (after forward);
backward ends at 6.5.  Measured all-reduce c=4, b=1, a=2 (sum 7).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from dreamddp.comm.cost import LinkModel
from dreamddp.prediction import simulate, simulated_algorithms
from dreamddp.schedule.profile import Profile
from dreamddp.schedule.compute import Interleaving, Skew

UNITS = ["c", "b", "a"]  # backward order


def tiny(nbytes=None) -> Profile:
    return Profile(
        units=list(UNITS),
        bp={"c": 1.0, "b": 2.0, "a": 3.0},
        comm={"c": 4.0, "b": 1.0, "a": 2.0},
        fwd={"a": 0.2, "b": 0.2, "c": 0.1},
        nbytes=nbytes or {},
        step_time=0.25,
    )


def run(algo, profile, **kw):
    r = simulate(algo, profile, H=2, **kw)
    return r.mean_iter, r.mean_wait, r.per_iter


def test_every_algorithm_on_the_engine_is_simulated():
    from dreamddp.algorithms import ALGORITHMS

    assert set(simulated_algorithms()) == {n for n, cls in ALGORITHMS.items() if not cls.syncs_itself}
    assert "ddp" not in simulated_algorithms()  # its traffic is DDP's own, in no plan
    # the every-algorithm tables leave out a window in wall-clock seconds, which no profile fixes
    assert set(simulated_algorithms()) - set(simulated_algorithms(profile_only=True)) == {"flsgd_timed"}


def test_ssgd():
    # 0.5 + 6 + 7 (blocking all-reduce) + 0.25
    assert run("ssgd", tiny()) == (13.75, 7.0, [(13.75, 7.0)] * 2)


def test_ascwfbp_per_unit_without_bytes():
    # c 1.5->5.5, b queued 5.5->6.5, a 6.5->8.5: wait 2 after backward ends at 6.5
    assert run("ascwfbp", tiny())[:2] == (8.75, 2.0)


def test_ascwfbp_buckets_by_bytes():
    # bucket [c, b] closes at 500 >= 450 bytes, launched at b's gradient (3.5),
    # 5 s -> 8.5; bucket [a] 8.5 -> 10.5: wait 4
    p = tiny({"c": 400, "b": 100, "a": 200})
    assert run("ascwfbp", p, bucket_mb=450 / 2**20)[:2] == (10.75, 4.0)


def test_flsgd():
    # iteration 0: 6.75; iteration 1 ((t+1) % 2 == 0) adds the 7 s average after the step
    assert run("flsgd", tiny()) == (10.25, 3.5, [(6.75, 0.0), (13.75, 7.0)])
    r = simulate("flsgd", tiny(), H=2, iterations=5)
    assert r.per_iter == [(6.75, 0.0), (13.75, 7.0)] * 2 + [(6.75, 0.0)]
    assert r.mean_iter == pytest.approx((3 * 6.75 + 2 * 13.75) / 5)


def test_plsgd_enp():
    # ceil(3/2) = 2: iteration 0 syncs c, b (c 1.5->5.5, b 5.5->6.5: hidden); iteration 1 syncs a: 6.5->8.5
    assert run("plsgd_enp", tiny()) == (7.75, 1.0, [(6.75, 0.0), (8.75, 2.0)])


def test_dreamddp_given_schedule_with_a_repeated_unit():
    # iteration 0: c 1.5->5.5, b (bubble) 5.5->6.5; iteration 1: b 3.5->4.5, a 6.5->8.5
    sched = {"c": [0], "b": [0, 1], "a": [1]}
    assert run("dreamddp", tiny(), schedule=sched) == (7.75, 1.0, [(6.75, 0.0), (8.75, 2.0)])


def test_dreamddp_default_schedule_is_the_dfs():
    assert run("dreamddp", tiny())[:2] == (7.75, 1.0)


def test_modelled_link():
    # world 2: ring factor 1, so at 8e-9 Gbit/s one byte takes one second; latency
    # 0.5 s per hop, 2(n-1) = 2 hops: every all-reduce pays +1 s.
    p = tiny({"c": 4, "b": 1, "a": 2})
    link = dict(world=2, link=LinkModel(8e-9, latency_s=0.5))
    assert run("ssgd", p, **link)[:2] == (14.75, 8.0)  # one fused 7-byte all-reduce: 8 s
    # per unit c=5, b=2, a=3: iteration 0 c 1.5->6.5 (hidden); iteration 1 b 3.5->5.5, a 6.5->9.5
    assert run("dreamddp", p, schedule={"c": [0], "b": [1], "a": [1]}, **link) == (8.25, 1.5, [(6.75, 0.0), (9.75, 3.0)])
    # buckets [c, b] (5 bytes -> 6 s) 3.5->9.5, [a] (3 s) 9.5->12.5
    assert run("ascwfbp", p, bucket_mb=5 / 2**20, **link)[:2] == (12.75, 6.0)
    assert run("flsgd", p, **link)[:2] == (10.75, 4.0)
    assert run("ssgd", p, world=1, link=LinkModel(1.0))[:2] == (6.75, 0.0)  # nobody to talk to


def test_deferred_carrier_real_transfer():
    """The real backend's transfer starts at the first wait (the deferred carrier), the
    collectives queued since the last one after another, each done no earlier than it."""
    from dreamddp.comm.cost import RealTransfer

    p = tiny({"c": 4, "b": 1, "a": 2})
    fast = dict(world=2, link=LinkModel(8e6))  # its deadlines pass at once: the real transfer is what waits
    real = RealTransfer(((0, 0.0), (1, 1.0)))  # one second per byte
    assert run("ssgd", p, **fast)[0] == pytest.approx(6.75)
    flat = lambda r: [r[0], r[1], *(x for it in r[2] for x in it)]  # noqa: E731
    assert flat(run("ssgd", p, carrier=real, **fast)) == pytest.approx([13.75, 7.0, *[13.75, 7.0] * 2])
    # iteration 0: c launched at 1.5, its real transfer starts at the wait (6.5): 4 s;
    # iteration 1: b and a both start at 6.5, one after another: b done at 7.5, a at 9.5
    sched = {"c": [0], "b": [1], "a": [1]}
    assert flat(run("dreamddp", p, schedule=sched, carrier=real, **fast)) == pytest.approx(
        [10.25, 3.5, 10.75, 4.0, 9.75, 3.0])
    # on a slow link the link's deadline is the later one: nothing changes
    slow = dict(world=2, link=LinkModel(8e-9))
    half = RealTransfer(((0, 0.0), (2, 1.0)))
    assert run("ssgd", p, carrier=half, **slow) == run("ssgd", p, **slow) == (13.75, 7.0, [(13.75, 7.0)] * 2)


def test_calibration_scales_bandwidth_term_only():
    p = tiny({"c": 4, "b": 1, "a": 2})
    assert run("ssgd", p, world=2, link=LinkModel(8e-9, latency_s=0.5, calibration=2.0))[:2] == (21.75, 15.0)


@pytest.mark.parametrize(
    "kw,msg",
    [
        (dict(algo="nope"), "unknown"),
        (dict(H=0), "algo.H=0: must be >= 1"),
        (dict(link=LinkModel(1.0)), "no nbytes"),
        (dict(bucket_mb=1.0), "no option 'bucket_mb'"),
        (dict(iterations=0), "iterations"),
        (dict(schedule={"zz": [0]}), "unknown unit 'zz'"),
        (dict(schedule={"c": [5]}), "outside"),
    ],
)
def test_bad_input(kw, msg):
    algo = kw.pop("algo", "dreamddp")
    with pytest.raises(ValueError, match=msg):
        simulate(algo, tiny(), **{"H": 2, **kw})


def test_deferred_carrier_groups_as_the_engines_carrier():
    """At a wait the simulator starts the real collectives the carrier would (comm/carry.py):
    adjacent slices of one buffer go as one.  Units of 100 kB (too big to pack), a link whose
    deadlines pass at once and a real backend that takes 1 s per collective whatever its size."""
    from dreamddp.comm.cost import RealTransfer

    p = tiny({"c": 100_000, "b": 100_000, "a": 100_000})
    real = RealTransfer(((0, 1.0), (300_000, 1.0)))
    fast = dict(world=2, link=LinkModel(8e6), carrier=real)
    # c and b are neighbours in the flat buffer: one real collective at the end of backward
    assert run("dreamddp", p, schedule={"c": [0], "b": [0], "a": [1]}, **fast)[:2] == pytest.approx((7.75, 1.0))
    # c and a are not (b lies between): two, one after another
    assert run("dreamddp", p, schedule={"c": [0], "a": [0], "b": [1]}, **fast)[:2] == pytest.approx((8.25, 1.5))
    # merged late (merge_delay=1), c and a are copied side by side into one buffer after the
    # step: at iteration 1's wait they go as one, then b's in place: 2 s, and iteration 0 waits for nothing
    late = dict(schedule={"c": [0], "a": [0], "b": [1]}, delayed=[[(0, 0), (2, 2)], []], merge_delay=1)
    assert run("dreamddp", p, **late, **fast)[:2] == pytest.approx((7.75, 1.0))


def test_step_carrier_starts_the_late_ones_as_the_iteration_ends():
    """The step carrier (``bandwidth.carrier=step``): what is still queued when an iteration
    ends starts then, once the slowest rank is there; the rest as the deferred carrier does.
    The late c and a of iteration 0 go (one collective, 1 s) at its end, and iteration 1 waits
    only for b's own real transfer at its wait: 1 s, not 2; but the late one's transfer takes
    the core from iteration 1's compute (its first second), so on the worker's core the step
    carrier gains nothing over the deferred one."""
    from dreamddp.comm.cost import RealTransfer

    p = tiny({"c": 100_000, "b": 100_000, "a": 100_000})
    fast = dict(world=2, link=LinkModel(8e6), carrier=RealTransfer(((0, 1.0), (300_000, 1.0))))
    late = dict(schedule={"c": [0], "a": [0], "b": [1]}, delayed=[[(0, 0), (2, 2)], []], merge_delay=1)
    per_iter = lambda r: [x for it in r[2] for x in it]  # noqa: E731
    assert per_iter(run("dreamddp", p, **late, **fast)) == pytest.approx([6.75, 0.0, 8.75, 2.0])
    assert per_iter(run("dreamddp", p, **late, **fast, carrier_at_step=True)) == pytest.approx([6.75, 0.0, 8.75, 1.0])
    # nothing late, nothing queued at an iteration's end: the same as deferred
    in_place = dict(schedule={"c": [0], "b": [0], "a": [1]}, **fast)
    assert run("dreamddp", p, **in_place, carrier_at_step=True) == run("dreamddp", p, **in_place)



def test_a_real_transfer_running_past_a_wait_takes_the_core():
    """Backward launches A (due at its end) then B (due in the next forward); A's wait starts
    both real transfers, 1 s each, one after the other.  The wait ends with A's; B's runs on,
    on the worker's core (gloo's threads share it), and the step waits for the core: 7.5 s of
    compute and A's 1 s wait, plus B's 1 s, which the step does not hide."""
    from dreamddp.engine.plan import Payload, SyncOp, When
    from dreamddp.schedule.compute import Compute
    from dreamddp.schedule.simulator import simulate_plan

    compute = Compute(fwd=np.ones(3), bp=np.ones(3), step=0.5)
    a = SyncOp(0, 0, Payload.PARAM, When.UNIT_READY, When.END_OF_BACKWARD)
    b = SyncOp(2, 2, Payload.PARAM, When.UNIT_READY, When.BEFORE_FORWARD)
    one_each = lambda queued: [([i], 1.0) for i in range(len(queued))]  # noqa: E731
    sim = lambda plan: simulate_plan(lambda t: plan, compute, lambda op: 0.0, H=1, iterations=2,  # noqa: E731
                                     carrier=one_each).per_iter
    assert np.allclose(sim((a, b)), [(8.5, 1.0)] * 2)
    assert np.allclose(sim((a,)), [(7.5, 1.0)] * 2)  # nothing queued behind the waited one


def one_unit() -> Profile:
    """Compute is backward alone (1 s), the all-reduce free: an iteration of S-SGD is the slowest
    rank's compute, whatever the skew draws."""
    return Profile(units=["a"], bp={"a": 1.0}, comm={"a": 0.0}, fwd={"a": 0.0}, step_time=0.0)


def test_skew_drawn_together_keeps_how_the_ranks_moved():
    # Measured: in every iteration one rank took 1.0 and the other 1.5, never both the same.
    apart = [np.array([1.0, 1.5]), np.array([1.5, 1.0])]
    together = simulate("ssgd", one_unit(), H=2, iterations=40, world=2, skew=Skew(apart, joint=True))
    assert together.mean_iter == pytest.approx(1.5)  # each iteration waits for the 1.5 s rank
    # Each rank on its own, some iterations draw 1.0 for both: less than any measured iteration took.
    alone = simulate("ssgd", one_unit(), H=2, iterations=40, world=2, skew=Skew(apart))
    assert 1.0 < alone.mean_iter < 1.5
    # A slow spell that slows both ranks alike is no skew when drawn together.
    alike = [np.array([1.0, 1.5]), np.array([1.0, 1.5])]
    res = simulate("ssgd", one_unit(), H=2, iterations=40, world=2, skew=Skew(alike, joint=True))
    assert {round(t, 9) for t, _ in res.per_iter} == {1.0, 1.5}  # each iteration as both ranks took it
    assert res.mean_wait == pytest.approx(0.0)  # neither waits for the other


def test_joint_skew_needs_aligned_samples():
    with pytest.raises(ValueError, match="same number of samples"):
        Skew([np.array([1.0, 1.1]), np.array([1.0])], joint=True)


def test_an_op_that_steps_moves_its_share_of_the_step_behind_its_wait():
    """``SyncOp.steps``: the optimizer step of the op's units runs where the op completes (after
    its wait, as DeAR steps a group in its forward pre-hook), not at the iteration's step, where
    it overlapped the link.  Two units, forward 1 s each, backward 1 s each, step 2 s of which
    1.5 s is the optimizer (half per unit), one 3 s collective of both units' gradients launched
    when the last is ready (4 s into iteration 0) and completed in the next forward."""
    from dreamddp.engine.plan import Payload, SyncOp, When
    from dreamddp.schedule.compute import Compute
    from dreamddp.schedule.simulator import simulate_plan

    compute = Compute(fwd=np.ones(2), bp=np.ones(2), step=2.0, optimizer=1.5, share=np.array([0.5, 0.5]))

    def timed(steps: bool):
        op = SyncOp(0, 1, Payload.GRAD, When.UNIT_READY, When.BEFORE_FORWARD, steps=steps)
        return simulate_plan(lambda t: (op,), compute, lambda op: 3.0, H=1, iterations=2).per_iter

    # the step at the end (0.5 s left there): the link, busy from 4 to 7, is waited for 2.5 s
    # from 4.5; then 1.5 s of step, 2 s forward, 2 s backward, 0.5 s step: 8.5 s per iteration
    assert timed(True) == [pytest.approx((8.5, 2.5))] * 2
    # a collective that does not step: the whole 2 s step ran while the link carried it
    assert timed(False) == [pytest.approx((7.0, 1.0))] * 2
    # the op's step a call of its own, 0.25 s more (Compute.step_call), after the same wait:
    # 2.5 wait, 1.5 + 0.25 step, 2 s forward, 2 s backward, 0.5 s step
    compute = replace(compute, step_call=0.25)
    assert timed(True) == [pytest.approx((8.75, 2.5))] * 2
    assert timed(False) == [pytest.approx((7.0, 1.0))] * 2  # an op that does not step makes no call
    with pytest.raises(ValueError, match="steps"):
        SyncOp(0, 1, Payload.OUTER, When.UNIT_READY, When.BEFORE_FORWARD, steps=True)
    with pytest.raises(ValueError, match="step shares"):
        Compute(fwd=np.ones(2), bp=np.ones(2), step=2.0, share=np.ones(3))


def test_the_engines_host_work_per_op_is_charged_where_it_runs():
    """``Compute.launch_host``/``complete_host``: a launch in backward delays the gradients after
    it (the hook runs on backward's thread), a completion adds its work after its wait.  Two
    units, forward and backward 1 s each, step 2 s, one 0.5 s all-reduce per unit launched when
    it is ready and completed at the end of backward; 0.1 s per launch, 0.2 s per completion."""
    from dreamddp.engine.plan import Payload, SyncOp, When
    from dreamddp.schedule.compute import Compute
    from dreamddp.schedule.simulator import simulate_plan

    plan = tuple(SyncOp(u, u, Payload.GRAD, When.UNIT_READY, When.END_OF_BACKWARD) for u in range(2))

    def timed(**host):
        compute = Compute(fwd=np.ones(2), bp=np.ones(2), step=2.0, **host)
        return simulate_plan(lambda t: plan, compute, lambda op: 0.5, H=1, iterations=2).per_iter

    # no host work: ready at 3 and 4, the second collective done at 4.5: 0.5 s waited
    assert timed() == [pytest.approx((6.5, 0.5))] * 2
    # the first launch (at 3) moves unit 1's gradient to 4.1; backward ends at 4.2; the first
    # collective (done 3.5) costs its 0.2 s of completion (4.4), the second (done 4.6) 0.2 s
    # waited and 0.2 s of completion (4.8); step: 6.8
    assert timed(launch_host=0.1, complete_host=0.2) == [pytest.approx((6.8, 0.2))] * 2


def test_a_turn_of_an_interleaving_lines_the_ranks_up_at_its_barrier():
    """``Interleaving``: runs trained in turns start every turn at a barrier outside the timed
    iterations, and the iteration reported is rank 0's, whose record it is.  Rank 0 computes 1 s per iteration, rank 1 1.5 s; FLSGD syncs once per window (H=2,
    a free all-reduce).  Continuous, the window's sync waits for all that rank 1 lags: every
    rank's pace is rank 1's.  One iteration per turn, rank 0 waits at the sync only for the
    0.5 s rank 1 lags in that iteration; one window per turn, for the window's 1 s."""
    skew = Skew([np.array([1.0]), np.array([1.5])], joint=True)

    def timed(turn):
        return simulate("flsgd", one_unit(), H=2, iterations=4, world=2, skew=skew,
                        interleaving=None if turn is None else Interleaving(turn))

    assert timed(None).mean_iter == pytest.approx(1.5)
    assert timed(1).per_iter == [pytest.approx((1.0, 0.0)), pytest.approx((1.5, 0.5))] * 2
    assert timed(2).per_iter == [pytest.approx((1.0, 0.0)), pytest.approx((2.0, 1.0))] * 2
    with pytest.raises(ValueError, match="turn"):
        timed(0)


def test_at_a_turns_barrier_what_is_on_the_wire_waits_with_its_rank():
    """Each rank's link is paused through its wait at the barrier (as Run.steps pauses it), so a collective in
    flight keeps its distance to the rank's clock.  One unit, backward 1 s (rank 1: 2 s), one 0.8 s
    collective launched at the gradient and completed in the next forward: rank 0 launches 1 s into
    the turn, waits 1 s at the barrier with its transfer paused, and in the next turn waits the
    0.8 s still to go, then computes 1 s."""
    from dreamddp.engine.plan import Payload, SyncOp, When
    from dreamddp.schedule.compute import Compute
    from dreamddp.schedule.simulator import simulate_plan

    op = SyncOp(0, 0, Payload.GRAD, When.UNIT_READY, When.BEFORE_FORWARD)
    compute = Compute(fwd=np.zeros(1), bp=np.ones(1), step=0.0)
    skew = Skew([np.array([1.0]), np.array([2.0])], joint=True)
    res = simulate_plan(lambda t: (op,), compute, lambda op: 0.8, H=1, iterations=3, skew=skew, world=2,
                        interleaving=Interleaving(1))
    assert res.per_iter == [pytest.approx((1.8, 0.8))] * 3


def test_the_forward_of_quiet_units_adds_up_as_one_addition_per_unit_would():
    # the simulator adds the forward of units with nothing due in one array operation; the
    # committed reports regenerate byte-identically only if that rounds as the loop did
    from dreamddp.schedule.simulator import _after

    rng = np.random.default_rng(3)
    clock = rng.uniform(0, 1e3, size=3)
    unit_forward = np.multiply.outer(rng.uniform(0.5, 2.0, size=3), rng.uniform(1e-6, 1e-2, size=40))
    units = list(range(39, -1, -1))
    expected = clock.copy()
    for u in units:
        expected = expected + unit_forward[:, u]
    assert np.array_equal(_after(clock, unit_forward, units), expected)
    assert np.array_equal(_after(clock, unit_forward, units[:1]), clock + unit_forward[:, 39])
    assert _after(clock, unit_forward, []) is clock


def _free_link() -> Profile:
    return replace(tiny(), comm={u: 0.0 for u in UNITS})  # nothing on the wire: only the ranks' drift shows


def test_a_slow_rank_stretches_its_passes_and_every_sync_waits_for_it():
    from dreamddp.speed import Speeds

    half = Speeds((1.0, 0.5))  # rank 1: forward 1, backward 12, step 0.25 (the step is not stretched)
    # S-SGD: rank 0 launches at 6.5, rank 1 at 13: rank 0 waits 6.5 every iteration
    assert run("ssgd", _free_link(), world=2, speeds=half) == (13.25, 3.25, [(13.25, 3.25)] * 2)
    # FLSGD pays the drift once per window: rank 0 computes two iterations (13.5) while rank 1
    # takes 26.5, then waits 13 at the average
    assert simulate("flsgd", _free_link(), H=2, world=2, speeds=half, iterations=4).per_iter == \
        [(10.0, 0.0), (16.5, 6.5)] * 2
    assert run("ssgd", _free_link(), world=2, speeds=Speeds((1.0, 1.0))) == run("ssgd", _free_link(), world=2)


def test_a_timed_window_lets_each_rank_take_the_steps_that_fit_and_only_the_merge_waits():
    from dreamddp.speed import Speeds

    half = Speeds((1.0, 0.5))  # an iteration takes rank 0 6.75, rank 1 13.25
    # window 21: rank 0 computes positions 0 and 1 (6.75 + 2 x 6.75 <= 21), skips 2 (13.5 + 13.5 > 21),
    # computes the last; rank 1 computes 0, skips 1 and 2 (13.25 + 26.5 > 21), computes 3. At the
    # merge rank 0 (at 20.25) waits for rank 1 (at 26.5); position 2 is nobody's iteration
    timed = simulate("flsgd_timed", _free_link(), H=4, world=2, speeds=half, iterations=4, window_s=21.0)
    assert timed.per_iter == [(10.0, 0.0), (6.75, 0.0), (13.125, 3.125)]
    turn = simulate("flsgd_timed", _free_link(), H=4, world=2, speeds=half, iterations=4, window_s=21.0,
                    interleaving=Interleaving(4))
    assert turn.per_iter == [(6.75, 0.0), (6.75, 0.0), (13.0, 6.25)]  # rank 0's, as its record has them
    # a window every step fits in is FLSGD's (whose units go as three collectives, not one: to rounding)
    wide = simulate("flsgd_timed", tiny(), H=4, world=2, speeds=half, iterations=8, window_s=1e9)
    flsgd = simulate("flsgd", tiny(), H=4, world=2, speeds=half, iterations=8)
    assert np.allclose(wide.per_iter, flsgd.per_iter, rtol=1e-12, atol=0)


def test_slow_spells_come_from_the_same_model_the_trainer_draws():
    from dreamddp.speed import Speeds

    always = Speeds(p=1.0, speed_min=0.5, speed_max=0.5)  # every iteration of every rank at half
    assert run("ssgd", _free_link(), world=2, speeds=always) == (13.25, 0.0, [(13.25, 0.0)] * 2)


def test_a_record_with_uplinks_per_worker_is_modelled_at_the_slowest():
    from dreamddp.prediction import record_link

    record = {"extra": {"link": {"gbps": 1.0, "worker_gbps": [1.0, 0.25], "alpha_ms": 2.0}},
              "config": {"bandwidth": {"latency_ms": 0.0, "calibration": 1.0}}}
    assert record_link(record) == LinkModel(0.25, 0.0, 1.0, 2e-3)
