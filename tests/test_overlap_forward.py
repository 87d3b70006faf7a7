"""dreamddp with overlap_forward: same numerics as plain dreamddp, averages land before the next forward."""

from __future__ import annotations

import time

import pytest
import torch
import torch.distributed as dist

from dist_util import run_workers
from dreamddp.algorithms.dreamddp_overlap import DreamDDPOverlap
from dreamddp.comm.communicator import Communicator
from dreamddp.comm.fake import FakeCommunicator
from dreamddp.comm.links.emulated import EmulatedLink
from dreamddp.engine.engine import PartialSyncEngine
from dreamddp.engine.units import enumerate_units
from engine_fixtures import build, batch, engine_step, loss_of, make_opt, small_model

SCHED = {"4": [0, 1], "3": [0], "2": [1], "0": [1]}  # unit 0 ("4") twice per window (bubble filling)


def peer_zeros(kind, tag, t):
    return [t, torch.zeros_like(t)]


def train(comm, overlap, rank=0, steps=6, opt_name="sgd", clip=0.0, on_engine=None):
    model = small_model()
    algo = build("dreamddp", SCHED, H=2, overlap_forward=overlap)
    engine = PartialSyncEngine(model, enumerate_units(model), comm, algo, grad_clip=clip)
    opt, sched = make_opt(opt_name, model)
    if on_engine:
        on_engine(engine, model)
    waits = []
    for t in range(steps):
        waits.append(engine_step(engine, model, opt, t, rank, sched).wait)
    engine.flush()
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone(), engine, waits


@pytest.mark.parametrize("opt_name, clip", [("sgd", 0.0), ("adam", 0.05)])
def test_overlap_equals_plain_dreamddp_exactly(opt_name, clip):
    ours, engine, _ = train(FakeCommunicator(2, 0, peer_zeros), True, opt_name=opt_name, clip=clip)
    plain, plain_engine, _ = train(FakeCommunicator(2, 0, peer_zeros), False, opt_name=opt_name, clip=clip)
    assert isinstance(engine.algorithm, DreamDDPOverlap) and not isinstance(plain_engine.algorithm, DreamDDPOverlap)
    assert engine.algorithm.describe()["overlap_forward"] is True
    assert torch.equal(ours, plain)


def test_in_flight_units_are_stepped_only_after_their_average():
    comm = FakeCommunicator(2, 0, peer_zeros)
    model = small_model()
    algo = build("dreamddp", SCHED, H=2, overlap_forward=True)
    engine = PartialSyncEngine(model, enumerate_units(model), comm, algo)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = engine.flat.params.clone()
    engine.begin_iteration(0)  # phase 0 syncs units 0 and 1 ("4", "3")
    loss_of(model, batch(0, 0)).backward()
    engine.end_backward()
    engine.step(opt)
    engine.after_step()
    a, b = engine.flat.span(0, 1)
    assert torch.equal(engine.flat.params[:b], before[:b])  # average still pending: not stepped, not averaged
    assert not torch.equal(engine.flat.params[b:], before[b:])  # the rest stepped at once
    grad01 = engine.flat.grads[:b].clone()
    assert grad01.abs().sum() > 0 and engine.flat.grads[b:].abs().sum() == 0  # kept for the deferred step
    engine.flush()
    torch.testing.assert_close(engine.flat.params[:b], before[:b] / 2 - 0.1 * grad01, rtol=0, atol=1e-7)


def _slow_link(rank, world):
    out = {}
    for overlap in (False, True):
        events = {"late": [], "inflight_at_step": 0, "equal": []}

        def instrument(engine, model):
            algo, handles = engine.algorithm, {}
            real_launch, real_complete, real_step = algo.launch, algo.on_complete, engine.step

            def launch(eng, op):
                h = real_launch(eng, op)
                handles[op.first] = h
                return h

            def on_complete(eng, op):  # right after the average landed, before the deferred step
                mine = eng.flat.param_slice(op.first, op.last).clone()
                gathered = [torch.empty_like(mine) for _ in range(world)]
                dist.all_gather(gathered, mine)
                events["equal"].append(all(torch.equal(g, mine) for g in gathered))
                real_complete(eng, op)

            def step(opt):
                events["inflight_at_step"] += sum(not h.done() for h in handles.values())
                real_step(opt)

            def check(u):
                def hook(_module, _args):
                    h = handles.get(u)
                    if h is not None and (h.record.complete is None or h.record.complete > time.perf_counter()):
                        events["late"].append(u)
                return hook

            algo.launch, algo.on_complete, engine.step = launch, on_complete, step
            for unit in engine.units:  # registered after the engine's own pre-hooks, so they run after them
                model.get_submodule(unit.name).register_forward_pre_hook(check(unit.index))

        link = EmulatedLink(gbps=0.0005, latency_ms=5.0, alpha_s=0.0)  # ~30-70 ms per unit average
        final, _, waits = train(Communicator(link=link), overlap, rank, steps=5, on_engine=instrument)
        out[overlap] = (final, events, sum(waits))
    return out


def test_slow_link_every_average_lands_before_the_next_forward_and_replicas_agree():
    results = run_workers(_slow_link, 2)
    for res in results:
        plain, overlap = res[False], res[True]
        torch.testing.assert_close(overlap[0], plain[0], rtol=1e-6, atol=1e-7)
        assert overlap[1]["late"] == [] and all(overlap[1]["equal"]) and len(overlap[1]["equal"]) == 3 * 2 + 2 * 3  # t even: 2 units, odd: 3
        assert overlap[1]["inflight_at_step"] > 0  # the step did not wait for them
        assert plain[1]["inflight_at_step"] == 0  # plain dreamddp waited at the end of backward
    assert not torch.equal(results[0][True][0], results[1][True][0])  # the local step after the average


def test_simulator_overlap_saves_the_unsynced_units_step_on_the_hand_profile():
    from dreamddp.schedule.profile import Profile
    from dreamddp.prediction import simulate

    # Forward a, b, c; backward c=1 b=2 a=3; all-reduce c=4 b=1 a=2; step .25, a third per unit.
    # Every unit every iteration: plain waits 2 at the end of backward (averages c 1.5->5.5,
    # b ->6.5, a ->8.5 after forward .5).  Overlap hides nothing there: a synced unit's step
    # waits for its average (SyncOp.steps), and a, first in forward, lands last.
    p = Profile(units=["c", "b", "a"], bp={"c": 1.0, "b": 2.0, "a": 3.0}, comm={"c": 4.0, "b": 1.0, "a": 2.0},
                fwd={"a": 0.2, "b": 0.2, "c": 0.1}, nbytes={}, step_time=0.25)
    every = {"a": [0], "b": [0], "c": [0]}
    plain = simulate("dreamddp", p, H=1, schedule=every)
    overlap = simulate("dreamddp", p, H=1, schedule=every, iterations=3, overlap_forward=True)
    assert (plain.mean_iter, plain.mean_wait) == (8.75, 2.0)
    assert overlap.per_iter == [pytest.approx((8.75, 2.0))] * 3
    # H=2, c and b in iteration 0, a in iteration 1: plain waits 2 for a (6.75, then 8.75);
    # overlap steps b and c (1/12 s each) while a is on the wire, then waits for a in the
    # next forward, 2 - 1/6, and applies a's step there: the window is 1/6 shorter.
    split = {"c": [0], "b": [0], "a": [1]}
    plain = simulate("dreamddp", p, H=2, schedule=split, iterations=4)
    overlap = simulate("dreamddp", p, H=2, schedule=split, iterations=4, overlap_forward=True)
    assert plain.per_iter == [pytest.approx((6.75, 0.0)), pytest.approx((8.75, 2.0))] * 2
    assert overlap.per_iter == [pytest.approx((8.5, 2 - 1 / 6)), pytest.approx((6.75 + 1 / 12, 0.0))] * 2


def test_a_landed_average_steps_its_units_in_one_optimizer_call_timed_as_forward_steps(monkeypatch):
    """Each average that lands in a forward pre-hook applies its units' deferred step in ONE
    optimizer call (SyncOp.steps: the simulator charges the op's share there), and the record's
    ``forward_steps`` holds those seconds.  SCHED fused: iteration 0 averages units 0-1 in one
    collective, iteration 1 unit 0 and units 2-3: the next forwards make 1 and 2 calls, over
    2 units and (forward runs the input side first) over units 2-3, then unit 0."""
    from dreamddp.engine import substep

    calls, in_forward = [], []
    step = substep.SubsetStepper.step

    def counted(self, hyper):
        calls.append(len(self.opt.param_groups[0]["params"]))
        return step(self, hyper)

    monkeypatch.setattr(substep.SubsetStepper, "step", counted)
    model = small_model()
    fused = [[["4", "3"]], [["4", "4"], ["2", "0"]]]
    algo = build("dreamddp", SCHED, fused, H=2, overlap_forward=True)
    engine = PartialSyncEngine(model, enumerate_units(model), FakeCommunicator(world_size=2, peer_fn=peer_zeros), algo)
    params = [len(list(model.get_submodule(u.name).parameters())) for u in engine.units]
    opt, _ = make_opt("sgd", model)
    for t in range(5):
        engine.begin_iteration(t)
        calls.clear()
        loss_of(model, batch(0, t)).backward()
        in_forward.append(list(calls))
        engine.end_backward()
        engine.step(opt)
        stats = engine.after_step()
        assert (stats.forward_steps > 0) == bool(in_forward[-1])
    after_0, after_1 = [params[0] + params[1]], [params[2] + params[3], params[0]]
    assert in_forward == [[], after_0, after_1, after_0, after_1]
    model = small_model()
    plain = PartialSyncEngine(model, enumerate_units(model), FakeCommunicator(world_size=2, peer_fn=peer_zeros),
                              build("dreamddp", SCHED, H=2))
    opt, _ = make_opt("sgd", model)
    assert [engine_step(plain, model, opt, t).forward_steps for t in range(2)] == [0.0, 0.0]


def test_sampled_events_of_averages_landing_in_the_next_forward_get_their_completion():
    """The averages in flight at the step complete in the next forward, after their iteration's
    stats were handed out: their sampled events are filled in place when they land (the row that
    holds them is the one the record keeps), never left without a completion."""
    model = small_model()
    engine = PartialSyncEngine(model, enumerate_units(model), FakeCommunicator(world_size=2, peer_fn=peer_zeros),
                               build("dreamddp", SCHED, H=2, overlap_forward=True), sample_every=1)
    opt, sched = make_opt("sgd", model)
    stats = [engine_step(engine, model, opt, t, 0, sched) for t in range(4)]
    after_its_iteration = [e for s in stats[:-1] for e in s.events if e["complete"] > s.end - s.start]
    engine.close()
    events = [e for s in stats for e in s.events]
    assert events and all(e["complete"] is not None and e["complete"] >= e["launch"] for e in events)
    assert after_its_iteration  # some did land in the next iteration's forward
