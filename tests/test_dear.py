"""DeAR: reduce-scatter in backward, all-gather + update in the next forward, == S-SGD."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dist_util import run_workers
from dreamddp.algorithms import build_algorithm
from dreamddp.comm.communicator import Communicator
from dreamddp.comm.fake import FakeCommunicator
from dreamddp.engine.engine import PartialSyncEngine
from dreamddp.engine.units import enumerate_units
from engine_fixtures import algo_cfg, batch, engine_step, loss_of, make_opt

CAP_MB = 80 / 2**20  # groups (backward order): [0, 1] (64 + 24 bytes), [2], [3]


def odd_model(seed: int = 0) -> nn.Module:
    """Units of very different sizes, several not a multiple of 2 or 4 elements.

    Backward order: Linear(3,4)=16, LayerNorm(3)=6, Linear(300,3)=903, Linear(8,300)=2700.
    """
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 300), nn.Tanh(), nn.Linear(300, 3), nn.LayerNorm(3), nn.Linear(3, 4))


def train(name, comm, rank=0, steps=5, opt_name="sgd", clip=0.0, seen=None, **kw):
    model = odd_model()
    engine = PartialSyncEngine(model, enumerate_units(model), comm, build_algorithm(algo_cfg(name, **kw)),
                               grad_clip=clip)
    opt, sched = make_opt(opt_name, model)
    for t in range(steps):
        engine_step(engine, model, opt, t, rank, sched)
        if seen is not None:
            seen.append(torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone())
    engine.flush()
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone(), engine


class HalfWorld:
    """A world of 2 in which rank 1's gradients are zero, consistent across collectives.

    reduce-scatter and all-reduce: the other rank sends zeros (means are exactly half);
    all-gather: the other rank holds its shard of that same mean.
    """

    def __init__(self):
        self.means = {}

    def __call__(self, kind, tag, t):
        if kind == "reduce_scatter":
            self.means[tag[3:]] = t / 2
        if kind == "all_gather":
            n = t.numel()
            return [t, self.means[tag[3:]][n : 2 * n]]
        return [t, torch.zeros_like(t)]


@pytest.mark.parametrize("opt_name", ["sgd", "adam"])
def test_dear_equals_ssgd_exactly_on_the_fake_world(opt_name):
    ours, engine = train("dear", FakeCommunicator(2, 0, HalfWorld()), opt_name=opt_name, bucket_mb=CAP_MB)
    ref, _ = train("ssgd", FakeCommunicator(2, 0, HalfWorld()), opt_name=opt_name)
    assert engine.algorithm.groups == [(0, 1), (2, 2), (3, 3)]
    assert torch.equal(ours, ref)
    assert engine.algorithm.describe()["memory_bytes"] == {"shards": 4 * (11 + 452 + 1350), "padded_copies": 4 * 904}


def test_dear_collective_order_and_pending_update():
    comm = FakeCommunicator(2, 0, HalfWorld())
    model = odd_model()
    engine = PartialSyncEngine(model, enumerate_units(model), comm, build_algorithm(algo_cfg("dear", bucket_mb=CAP_MB)))
    opt, _ = make_opt("sgd", model)
    before = engine.flat.params.clone()
    engine.begin_iteration(0)
    loss_of(model, batch(0, 0)).backward()
    assert [c.tag for c in comm.calls] == ["rs:0-1", "rs:2-2", "rs:3-3"]  # during backward, output side first
    engine.end_backward()
    engine.step(opt)
    engine.after_step()
    assert torch.equal(engine.flat.params, before)  # the update waits for the next forward
    assert len(comm.calls) == 3
    engine.begin_iteration(1)
    order = []
    hooks = [model[i].register_forward_pre_hook(lambda m, a, i=i: order.append((i, len(comm.calls)))) for i in (0, 2, 4)]
    model(batch(0, 1)[0])
    # Forward order: group [3] gathers first; each pre-hook launches the next group's gather.
    assert [c.tag for c in comm.calls[3:]] == ["ag:3-3", "ag:2-2", "ag:0-1"]
    assert order == [(0, 5), (2, 6), (4, 6)]  # module 0 ran with ag:3-3 done and ag:2-2 in flight
    assert not torch.equal(engine.flat.params, before) and not engine.algorithm.pending
    assert engine.flat.grads.abs().sum() == 0  # zeroed per group after its update
    for h in hooks:
        h.remove()


def _dear_vs_ssgd(rank, world):
    out = {}
    for opt_name, clip in (("sgd", 0.0), ("adam", 0.5)):
        dear, engine = train("dear", Communicator(), rank, opt_name=opt_name, clip=clip, bucket_mb=CAP_MB)
        ssgd, _ = train("ssgd", Communicator(), rank, opt_name=opt_name, clip=clip)
        out[opt_name] = (dear, ssgd, engine.stats.grad_norm)
    return out


@pytest.mark.parametrize("world", [2, 4])
def test_dear_equals_ssgd_on_gloo(world):
    results = run_workers(_dear_vs_ssgd, world)
    for res in results:
        for opt_name, (dear, ssgd, norm) in res.items():
            torch.testing.assert_close(dear, ssgd, rtol=1e-5, atol=1e-6)
            assert (norm is not None) == (opt_name == "adam")
    for opt_name in ("sgd", "adam"):  # replicas bitwise identical
        assert all(torch.equal(r[opt_name][0], results[0][opt_name][0]) for r in results)


def test_dear_simulator_exact_steady_state():
    from dreamddp.schedule.profile import Profile
    from dreamddp.prediction import simulate

    # Forward a, b, c (backward c, b, a): fwd .2/.2/.1, bp c=1 b=2 a=3, measured all-reduce
    # c=4 b=1 a=2 on 2 workers, so reduce-scatter = all-gather = half; one unit per group; step
    # .25, all of it the optimizer's, a third per unit (no bytes: equal shares), which DeAR applies
    # to each group in its forward pre-hook, after its all-gather (SyncOp.steps), none at the step.
    # Backward (starting at fwd end F): RS c F+1 -> F+3, b F+3 -> F+3.5, a F+6 -> F+7 (link busy until F+7).
    # Next forward (starts at F+6): AG a 7 -> 8 (wait 2); at a's pre-hook AG b 8 -> 8.5, a's step
    # (1/12) and forward (.2) (wait .3 - 1/12); at b's pre-hook AG c 8.5 -> 10.5, b's step and
    # forward (wait 1.8 - 1/12), c's step: exposed 3.85 + 1/12, iteration 6.75 + 3.85 + 1/12.
    # (The first plan has no all-gathers: that iteration charges the whole step; the warm-up
    # window of H=2 drops it.)
    p = Profile(units=["c", "b", "a"], bp={"c": 1.0, "b": 2.0, "a": 3.0}, comm={"c": 4.0, "b": 1.0, "a": 2.0},
                fwd={"a": 0.2, "b": 0.2, "c": 0.1}, nbytes={}, step_time=0.25)
    r = simulate("dear", p, H=2, iterations=3)
    assert r.per_iter == [pytest.approx((10.6 + 1 / 12, 3.85 + 1 / 12))] * 3
    assert simulate("ssgd", p, H=1).mean_iter == 13.75
    # Clipping: every reduce-scatter completes at the end of backward, then the norm's scalar
    # all-reduce (no time on the measured link): backward ends at F+6 and waits for RS a
    # until F+7 (1.0); the next forward finds the link idle and waits as above, less the
    # 1.0 s it already waited: iteration 6.75 + 3.85 + 1/12 again, exposed the same.
    r = simulate("dear", p, H=2, iterations=3, grad_clip=1.0)
    assert r.per_iter == [pytest.approx((10.6 + 1 / 12, 3.85 + 1 / 12))] * 3
    assert [(op.collective, op.complete.value) for op in r.ops[0] if op.launch.value != "before_forward"] == [
        ("reduce_scatter", "end_of_backward")] * 3 + [("all_reduce", "end_of_backward")]


def test_clipping_all_reduces_the_norm_in_the_plan():
    """Under clipping the norm's all-reduce is a plan op the engine runs at the end of backward,
    after every reduce-scatter."""
    comm = FakeCommunicator(2, 0, HalfWorld())
    model = odd_model()
    engine = PartialSyncEngine(model, enumerate_units(model), comm, build_algorithm(algo_cfg("dear", bucket_mb=CAP_MB)),
                               grad_clip=0.5)
    opt, _ = make_opt("sgd", model)
    stats = engine_step(engine, model, opt, 0)
    assert [c.tag for c in comm.calls] == ["rs:0-1", "rs:2-2", "rs:3-3", "grad_norm"]
    assert [op.collective for op in stats.ops] == ["reduce_scatter"] * 3 + ["all_reduce"]
    assert stats.grad_norm is not None and stats.grad_norm > 0


def test_an_evaluation_forward_between_iterations_launches_nothing():
    """Forward pre-hooks also fire in evaluation (after a flush): they launch no all-gather, and the
    next iteration starts a fresh pipeline (reduce-scatters only)."""
    model = odd_model()
    comm = FakeCommunicator(world_size=2, peer_fn=HalfWorld())
    engine = PartialSyncEngine(model, enumerate_units(model), comm, build_algorithm(algo_cfg("dear", bucket_mb=CAP_MB)))
    opt, _ = make_opt("sgd", model)
    for t in range(3):
        engine_step(engine, model, opt, t)
    engine.flush()
    calls = len(comm.calls)
    with torch.no_grad():
        for _ in range(2):
            model(batch(0, 9)[0])
    assert len(comm.calls) == calls
    engine_step(engine, model, opt, 3)
    assert [c.kind for c in comm.calls[calls:]] == ["reduce_scatter"] * 3
