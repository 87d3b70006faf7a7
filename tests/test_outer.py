"""The sync pipeline's outer step on the partial syncs (dreamddp/engine/pipeline.py), exact on a fake
communicator against a per-parameter reference that uses torch.optim.SGD(nesterov=True) as the
outer optimizer: FLSGD with it is DiLoCo; PLSGD-ENP with it steps each unit's anchor at the
iteration its group syncs, before the local step (layer-wise DiLoCo)."""

from __future__ import annotations

import pytest
import torch

from dreamddp.algorithms import build_algorithm
from dreamddp.comm.fake import FakeCommunicator
from dreamddp.config import ConfigError
from dreamddp.engine.engine import PartialSyncEngine
from dreamddp.engine.units import enumerate_units
from dreamddp.schedule.partition import equal_count_groups
from engine_fixtures import algo_cfg, batch, engine_step, loss_of, small_model
from test_diloco import reference

NESTEROV = dict(outer_optimizer="nesterov", outer_lr=0.7)


def train(name: str, steps: int, comm=None, **kw):
    comm = comm or FakeCommunicator(2, 0, lambda kind, tag, t: [t, 3 * t])  # the mean is twice the local value
    model = small_model()
    engine = PartialSyncEngine(model, enumerate_units(model), comm, build_algorithm(algo_cfg(name, **kw)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for t in range(steps):
        engine_step(engine, model, opt, t)
    engine.flush()
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone(), engine


@pytest.mark.parametrize("mu", [0.9, 0.0])
def test_flsgd_with_nesterov_is_diloco(mu):
    ours, _ = train("flsgd", 9, H=3, outer_momentum=mu, **{k: v for k, v in NESTEROV.items()})
    torch.testing.assert_close(ours, reference(9, 3, 1, 0, 0.0, 0.7, mu, factor=2.0), rtol=1e-6, atol=1e-7)


def layerwise_reference(steps: int, H: int, mu: float, lr: float = 0.7, factor: float = 2.0) -> torch.Tensor:
    """PLSGD-ENP with the outer optimizer, per parameter: in iteration t the units of group
    t mod H take an outer Nesterov step on their anchors after backward, the parameters become
    the anchors, then the local step applies on top."""
    model = small_model()
    units = enumerate_units(model)
    groups = equal_count_groups(len(units), H)
    params = [[p for u in g for p in units[u].params] for g in groups]
    anchors = [[p.detach().clone().requires_grad_() for p in ps] for ps in params]
    outer = [torch.optim.SGD(a, lr=lr, momentum=mu, nesterov=mu > 0) for a in anchors]
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for t in range(steps):
        opt.zero_grad()
        loss_of(model, batch(0, t)).backward()
        g = t % H
        for a, w in zip(anchors[g], params[g]):
            a.grad = factor * (a.detach() - w.detach())
        outer[g].step()
        with torch.no_grad():
            for w, a in zip(params[g], anchors[g]):
                w.copy_(a)
        opt.step()
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach()


@pytest.mark.parametrize("mu", [0.9, 0.0])
def test_plsgd_enp_with_nesterov_steps_each_groups_anchor_when_it_syncs(mu):
    ours, _ = train("plsgd_enp", 8, H=2, outer_momentum=mu, **NESTEROV)
    torch.testing.assert_close(ours, layerwise_reference(8, 2, mu), rtol=1e-6, atol=1e-7)


def _peers(kind, tag, t):
    """A peer whose parameters are ours plus 0.01: its outer gradient (anchor - theta) is ours less 0.01."""
    return [t, t + (0.01 if tag.startswith("param") else -0.01)]


def test_an_outer_step_of_one_without_momentum_is_the_average():
    avg, _ = train("plsgd_enp", 6, comm=FakeCommunicator(2, 0, _peers), H=2)
    outer, _ = train("plsgd_enp", 6, comm=FakeCommunicator(2, 0, _peers), H=2, outer_optimizer="nesterov",
                     outer_lr=1.0, outer_momentum=0.0)
    torch.testing.assert_close(outer, avg, rtol=1e-6, atol=1e-7)


def test_avg_sends_the_parameters_in_place_and_nesterov_the_outer_gradient():
    _, plain = train("flsgd", 2, H=2)
    _, outer = train("flsgd", 2, H=2, **NESTEROV)
    assert [op.payload.value for op in plain.algorithm.plan(1)] == ["param"]
    assert [op.payload.value for op in outer.algorithm.plan(1)] == ["outer"]
    assert plain.algorithm.state_dict() == {} and set(outer.algorithm.state_dict()) == {"sync"}


def test_the_anchor_and_momentum_resume_from_a_checkpoint():
    _, a = train("plsgd_enp", 5, H=2, **NESTEROV)
    _, b = train("plsgd_enp", 1, H=2, **NESTEROV)
    b.algorithm.load_state_dict(a.algorithm.state_dict())
    assert torch.equal(b.algorithm.sync.anchor, a.algorithm.sync.anchor)
    assert str(b.algorithm.sync.outer.state_dict()) == str(a.algorithm.sync.outer.state_dict())
    _, avg = train("plsgd_enp", 1, H=2)
    with pytest.raises(ValueError, match="disagree on the anchor"):
        avg.algorithm.load_state_dict(a.algorithm.state_dict())


@pytest.mark.parametrize("option", [{"merge_delay": 1}, {"overlap_forward": True}])
def test_the_outer_optimizer_is_refused_beside_a_late_merge(option):
    with pytest.raises(ConfigError, match=f"algo.{next(iter(option))}"):
        build_algorithm(algo_cfg("dreamddp", **NESTEROV, **option), {"schedule": {"H": 2, "schedule": {}}})


def delayed_reference(steps: int, H: int, mu: float, lr: float = 0.7, factor: float = 2.0) -> torch.Tensor:
    """FLSGD with the one-step-late outer step (flsgd.py's rule), per parameter, with
    torch.optim.SGD(nesterov=True) stepping the anchor."""
    model = small_model()
    params = list(model.parameters())
    anchor = [p.detach().clone().requires_grad_() for p in params]
    outer = torch.optim.SGD(anchor, lr=lr, momentum=mu, nesterov=mu > 0)
    start = [p.detach().clone() for p in params]  # s: where the window's progress is measured from
    opt = torch.optim.SGD(params, lr=0.05, momentum=0.9)
    pending = None
    for t in range(steps):
        opt.zero_grad()
        loss_of(model, batch(0, t)).backward()
        opt.step()
        if (t + 1) % H:
            continue
        sent = [factor * (s - p.detach()) for s, p in zip(start, params)]
        if pending is None:
            start = [p.detach().clone() for p in params]
        else:
            for a, d in zip(anchor, pending):
                a.grad = d
            outer.step()
            with torch.no_grad():
                for p, a, s in zip(params, anchor, start):
                    p.add_(a - s)
            start = [p.detach().clone() for p in params]
        pending = sent
    return torch.nn.utils.parameters_to_vector(params).detach()


@pytest.mark.parametrize("mu", [0.9, 0.0])
def test_the_one_step_late_outer_update_follows_its_rule(mu):
    ours, engine = train("flsgd", 10, H=2, outer_momentum=mu, timing="late", **NESTEROV)
    torch.testing.assert_close(ours, delayed_reference(10, 2, mu), rtol=1e-6, atol=1e-7)
    (op,) = engine.algorithm.plan(1)
    assert op.lag == 2  # it completes at the end of the next window


def test_the_one_step_late_update_resumes_with_its_mean_in_flight():
    """A checkpoint between a launch and its landing keeps the landed mean, the anchor and the
    window's starting point, and the resumed run ends where the uninterrupted one does."""
    whole, _ = train("flsgd", 8, H=2, timing="late", **NESTEROV)
    comm = FakeCommunicator(2, 0, lambda kind, tag, t: [t, 3 * t])
    model = small_model()
    engine = PartialSyncEngine(model, enumerate_units(model), comm, build_algorithm(algo_cfg("flsgd", H=2, timing="late", **NESTEROV)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for t in range(4):
        engine_step(engine, model, opt, t)
    engine.flush()
    saved = engine.algorithm.state_dict()["sync"]
    assert len(saved["inflight"]) == 1
    params, opt_state = [p.detach().clone() for p in model.parameters()], opt.state_dict()
    model2 = small_model()
    with torch.no_grad():
        for p, q in zip(model2.parameters(), params):
            p.copy_(q)
    engine2 = PartialSyncEngine(model2, enumerate_units(model2), FakeCommunicator(2, 0, lambda kind, tag, t: [t, 3 * t]),
                                build_algorithm(algo_cfg("flsgd", H=2, timing="late", **NESTEROV)))
    opt2 = torch.optim.SGD(model2.parameters(), lr=0.05, momentum=0.9)
    opt2.load_state_dict(opt_state)
    engine2.algorithm.load_state_dict({"sync": saved})
    for t in range(4, 8):
        engine_step(engine2, model2, opt2, t)
    engine2.flush()
    torch.testing.assert_close(torch.nn.utils.parameters_to_vector(model2.parameters()).detach(), whole, rtol=0, atol=0)


def test_a_late_outer_step_is_refused_where_the_plan_lands_on_its_own_timing():
    with pytest.raises(ConfigError, match="algo.timing=late: not with algo=streaming_diloco"):
        build_algorithm(algo_cfg("streaming_diloco", timing="late"))
