"""Streaming DiLoCo: plain DiLoCo == flsgd, exact outer steps vs torch SGD, stagger, anchors, bytes."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn

from dist_util import run_workers
from dreamddp.algorithms import build_algorithm
from dreamddp.algorithms.fragments import fragments, unit_blocks
from dreamddp.engine.codecs import E3M0
from dreamddp.comm.communicator import Communicator
from dreamddp.comm.fake import FakeCommunicator
from dreamddp.engine.engine import PartialSyncEngine
from dreamddp.engine.units import enumerate_units
from engine_fixtures import algo_cfg, batch, engine_step, loss_of, small_model

DILOCO = dict(fragments=1, fragment_pattern="strided", tau=0, alpha=0.0, outer_lr=0.7, outer_momentum=0.9,
              compress="none", compress_block=1024)


def cfg(name="streaming_diloco", **kw):
    return algo_cfg(name, **({**DILOCO, **kw} if name == "streaming_diloco" else kw))


def train(comm, name="streaming_diloco", rank=0, steps=8, model_fn=small_model, after=None, **kw):
    model = model_fn()
    engine = PartialSyncEngine(model, enumerate_units(model), comm, build_algorithm(cfg(name, **kw)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    wire = []
    for t in range(steps):
        wire.append(engine_step(engine, model, opt, t, rank).wire_bytes)
        if after:
            after(engine, t)
    engine.flush()
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone(), engine, wire


def reference(steps, H, P, tau, alpha, outer_lr, mu, factor, pattern="strided"):
    """Streaming DiLoCo written per parameter with torch.optim.SGD(nesterov) as the outer optimizer;
    ``factor``: the mean outer gradient is factor * the local one (the fake world's peers)."""
    model = small_model()
    units = enumerate_units(model)
    frags = fragments([u.name for u in units], P, pattern)
    fparams = [[p for u in f for p in units[u].params] for f in frags]
    anchors = [[p.detach().clone().requires_grad_() for p in ps] for ps in fparams]
    outer = [torch.optim.SGD(a, lr=outer_lr, momentum=mu, nesterov=mu > 0) for a in anchors]
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    pending = []
    for t in range(steps):
        opt.zero_grad()
        loss_of(model, batch(0, t)).backward()
        opt.step()
        for p in range(P):
            if (t + 1) % H == ((p + 1) * H // P) % H:
                pending.append((t + tau, p, [factor * (a.detach() - w.detach()) for a, w in zip(anchors[p], fparams[p])]))
        for due, p, deltas in [job for job in pending if job[0] <= t]:
            for a, d in zip(anchors[p], deltas):
                a.grad = d
            outer[p].step()
            with torch.no_grad():
                for w, a in zip(fparams[p], anchors[p]):
                    w.mul_(alpha).add_(a, alpha=1 - alpha)
        pending = [job for job in pending if job[0] > t]
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach()


@pytest.mark.parametrize("P, tau, alpha, mu, H", [(1, 0, 0.0, 0.9, 3), (2, 1, 0.5, 0.9, 4), (4, 2, 0.3, 0.0, 4)])
def test_outer_steps_equal_a_per_parameter_torch_reference(P, tau, alpha, mu, H):
    triple = FakeCommunicator(2, 0, lambda kind, tag, t: [t, 3 * t])  # mean = 2 * local
    ours, engine, _ = train(triple, H=H, fragments=P, tau=tau, alpha=alpha, outer_momentum=mu, steps=9)
    ref = reference(9, H, P, tau, alpha, 0.7, mu, factor=2.0)
    torch.testing.assert_close(ours, ref, rtol=1e-6, atol=1e-7)


def test_staggered_schedule_every_fragment_once_per_window():
    launched = {}
    comm = FakeCommunicator(2, 0)
    _, engine, _ = train(comm, H=4, fragments=2, tau=1, steps=12,
                         after=lambda e, t: launched.setdefault(t, [c.tag for c in comm.calls[len(sum(launched.values(), [])):]]))
    algo = engine.algorithm
    assert algo.offset == [2, 0]
    tag = [f"outer:{op.first}-{op.last}" for op in algo.fragment_ops]  # each fragment's op, by its first run
    assert {t: tags for t, tags in launched.items() if tags} == {
        1: [tag[0]], 3: [tag[1]], 5: [tag[0]], 7: [tag[1]], 9: [tag[0]], 11: [tag[1]]}
    assert algo.merges == [(2, 0), (4, 1), (6, 0), (8, 1), (10, 0)]  # tau = 1 step later; the last is in flight
    assert sorted(u for f in algo.frags for u in f) == [0, 1, 2, 3]  # disjoint cover of the model
    assert [algo.sync_iterations(u, 4) for u in range(4)] == [[3], [1], [3], [1]]


def test_fragments_place_embeddings_and_head_explicitly():
    names = ["transformer.ln_f"] + [f"transformer.h.{b}.{m}" for b in (3, 2, 1, 0) for m in ("mlp", "attn")] + [
        "transformer.wpe", "transformer.wte"]
    assert unit_blocks(names) == [3, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0]  # ln_f with the last block, wte/wpe with the first
    assert fragments(names, 2, "strided") == [[3, 4, 7, 8, 9, 10], [0, 1, 2, 5, 6]]
    assert fragments(names, 2, "sequential") == [[5, 6, 7, 8, 9, 10], [0, 1, 2, 3, 4]]
    stages = ["linear", "layer2.0.conv1", "layer1.1.bn", "layer1.0.conv", "bn1", "conv1"]
    assert unit_blocks(stages) == [1, 1, 0, 0, 0, 0]  # ResNet stages; stem with stage 1, classifier with the last
    with pytest.raises(ValueError, match="algo.fragments=3"):
        fragments(stages, 3)


def test_memory_is_reported():
    _, engine, _ = train(FakeCommunicator(2, 0), H=4, fragments=2, tau=1, steps=1)
    mem = engine.algorithm.describe()["memory_bytes"]
    n = engine.flat.params.numel()
    sizes = [sum(engine.units[u].numel for u in f) for f in engine.algorithm.frags]
    assert mem == {"anchor": 4 * n, "outer_state": 4 * n, "inflight_peak": 4 * max(sizes)}


def wide_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 256), nn.Tanh(), nn.Linear(256, 256), nn.Linear(256, 4))


def test_e3m0_sends_about_an_eighth_of_fp32():
    sent = {}
    for q in ("none", "fp16", "e3m0"):
        _, _, wire = train(FakeCommunicator(2, 0), model_fn=wide_model, H=2, steps=4, compress=q)
        sent[q] = sum(wire)
    # Wire bytes per element at n=2: fp32 ring all-reduce 2 * (1/2) * 4 = 4; gathered fp16 (1/2) * 2 * 2 = 2;
    # gathered E3M0 (1/2) * 2 * 0.5 = 0.5, plus its scales.
    assert sent["fp16"] / sent["none"] == pytest.approx(0.5)
    n = sum(p.numel() for p in wide_model().parameters())
    assert sent["e3m0"] / sent["none"] == E3M0(1024).nbytes(n) / (4 * n)  # codes + one fp32 scale per block
    assert 0.125 < sent["e3m0"] / sent["none"] < 0.128


def _plain_diloco_vs_flsgd(rank, world):
    plain = dict(fragments=1, tau=0, alpha=0.0, outer_lr=1.0, outer_momentum=0.0)
    diloco, _, _ = train(Communicator(), rank=rank, H=3, steps=7, **plain)
    flsgd, _, _ = train(Communicator(), name="flsgd", rank=rank, H=3, steps=7)
    anchors = []

    def check(engine, t):
        a = engine.algorithm.sync.anchor
        gathered = [torch.empty_like(a) for _ in range(world)]
        dist.all_gather(gathered, a)
        anchors.append(all(torch.equal(g, a) for g in gathered))

    results = {}
    for q in ("none", "e3m0"):
        anchors.clear()
        final, engine, _ = train(Communicator(), rank=rank, H=4, fragments=2, tau=1, alpha=0.5, compress=q,
                                 steps=9, after=check)
        results[q] = (final, list(anchors), list(engine.algorithm.merges))
    return diloco, flsgd, results


def test_plain_diloco_equals_flsgd_and_replicas_agree_on_the_anchor():
    out = run_workers(_plain_diloco_vs_flsgd, 2)
    for diloco, flsgd, _ in out:
        torch.testing.assert_close(diloco, flsgd, rtol=1e-5, atol=1e-6)
    assert not torch.equal(out[0][0], out[1][0])  # 7 steps, H=3: one local step since the last average
    for q in ("none", "e3m0"):
        finals = [r[2][q][0] for r in out]
        for _, anchors_equal, merges in (r[2][q] for r in out):
            assert all(anchors_equal) and merges == [(2, 0), (4, 1), (6, 0), (8, 1)]
        assert not torch.equal(finals[0], finals[1])  # alpha = 0.5 keeps local progress


def test_simulator_streaming_diloco():
    from dreamddp.schedule.profile import Profile
    from dreamddp.prediction import simulate

    # Iteration 6.75 s without traffic; all-reduce of the whole model 7 s on 2 workers.
    p = Profile(units=["c", "b", "a"], bp={"c": 1.0, "b": 2.0, "a": 3.0}, comm={"c": 4.0, "b": 1.0, "a": 2.0},
                fwd={"a": 0.2, "b": 0.2, "c": 0.1}, nbytes={}, step_time=0.25)
    plain = simulate("streaming_diloco", p, H=2, fragments=1, tau=0)
    assert plain.per_iter == simulate("flsgd", p, H=2).per_iter == [(6.75, 0.0), (13.75, 7.0)]
    # tau = 1: the 7 s average launched after step 1 overlaps iteration 2 (6.75 s) and is waited 0.25 s.
    lag = simulate("streaming_diloco", p, H=2, fragments=1, tau=1)
    assert lag.per_iter == [pytest.approx((7.0, 0.25)), pytest.approx((6.75, 0.0))]
    # E3M0: gathered 4-bit payloads (+ a scale per 1024) at half the all-reduce's ring factor.
    q = simulate("streaming_diloco", p, H=2, fragments=1, tau=0, compress="e3m0")
    assert q.per_iter[1][1] == pytest.approx(7 * 0.5 * 2 * E3M0(1024).nbytes(2**20) / 2**22)
    # Two fragments (no blocks here, so every unit is one; strided over forward order a, b, c):
    # fragment 0 = {a, c} (6 s) syncs at even t, fragment 1 = {b} (1 s) at odd t.
    two = simulate("streaming_diloco", p, H=2, fragments=2, tau=0)
    assert two.per_iter == [pytest.approx((6.75 + 6.0, 6.0)), pytest.approx((6.75 + 1.0, 1.0))]


def test_evaluation_sees_the_global_model_and_the_inner_optimizer_follows_the_recipe():
    from types import SimpleNamespace

    from dreamddp.algorithms import ALGORITHMS

    comm = FakeCommunicator(2, 0, lambda kind, tag, t: [t, torch.zeros_like(t)])
    _, engine, _ = train(comm, steps=5, H=2, alpha=0.5, tau=1)
    algo, replica = engine.algorithm, engine.flat.params.clone()
    assert not torch.equal(replica, algo.sync.anchor)  # replicas moved on since the last merge
    with algo.evaluation(engine):
        assert torch.equal(engine.flat.params, algo.sync.anchor)
    assert torch.equal(engine.flat.params, replica)  # the replica is back, bitwise
    cls = ALGORITHMS["streaming_diloco"]
    assert cls.optimizer_name(cfg(), SimpleNamespace(optimizer="adam")) == "adamw"  # the LM recipes
    assert cls.optimizer_name(cfg(), SimpleNamespace(optimizer="sgd")) == "sgd"  # the ResNets'
    assert cls.optimizer_name(cfg(inner_adamw=False), SimpleNamespace(optimizer="adam")) == "adam"


def test_a_checkpoint_laid_out_for_other_buffers_is_a_one_line_error():
    """CUDA's flat buffers pad each parameter, the CPU's do not: an anchor saved on one does
    not fit the other, and says so instead of failing inside a copy."""
    _, engine, _ = train(FakeCommunicator(2, 0), H=4, fragments=2, tau=1, steps=1)
    state = engine.algorithm.state_dict()
    state["sync"]["anchor"] = torch.zeros(state["sync"]["anchor"].numel() + 128)
    with pytest.raises(ValueError, match="anchor holds .* elements where this run's flat buffers hold .*kind of device"):
        engine.algorithm.load_state_dict(state)
