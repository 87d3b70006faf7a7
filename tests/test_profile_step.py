"""The start-up profile's step: the optimizer step alone (``optimizer_time``) and, as
``step_time``, the whole pass less its forward and backward, as the training loop's
records count "step and the rest" (zeroing the flat gradients comes first in a pass);
and what one more optimizer call costs (``optimizer_call_time``).
"""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn

from dreamddp.algorithms import build_algorithm
from dreamddp.comm.fake import FakeCommunicator
from dreamddp.engine.engine import PartialSyncEngine
from dreamddp.models import model_units
from dreamddp.schedule.profile import Profile, load_profile, save_profile
from dreamddp.warmup import profiler
from dreamddp.warmup.profiler import measure_profile
from engine_fixtures import algo_cfg

OPTIMIZER_S, ZEROING_S = 0.02, 0.03


class SlowSGD(torch.optim.SGD):
    def step(self, closure=None):
        time.sleep(OPTIMIZER_S)
        return super().step(closure)


def two_layers():
    """Two linear units on the engine with nothing to sync: (model, loss_fn, engine)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8))
    x = torch.randn(4, 8)
    loss_fn = lambda: model(x).square().mean()  # noqa: E731
    return model, loss_fn, PartialSyncEngine(model, model_units(model, loss_fn), FakeCommunicator(world_size=1),
                                             build_algorithm(algo_cfg("nosync")))


def test_step_time_counts_the_pass_outside_forward_and_backward():
    model, loss_fn, engine = two_layers()
    zero = engine.flat.zero_grads

    def slow_zero():
        time.sleep(ZEROING_S)
        zero()

    engine.flat.zero_grads = slow_zero  # the engine zeroes the flat gradients as a pass begins
    profile = measure_profile(engine, engine.comm, SlowSGD(model.parameters(), lr=0.01), loss_fn,
                              iterations=3, comm_repeats=0)
    assert OPTIMIZER_S <= profile.optimizer_time < OPTIMIZER_S + ZEROING_S
    assert profile.step_time >= profile.optimizer_time + ZEROING_S
    # two units stepped in two calls against one: one call more, OPTIMIZER_S of sleep more
    assert OPTIMIZER_S <= profile.optimizer_call_time < OPTIMIZER_S + 0.01
    # every rank's pass, its skew's unit, is the whole pass
    passes = profile.meta["compute_by_rank"][0]
    assert min(passes) >= sum(profile.fwd.values()) + sum(profile.bp.values()) + OPTIMIZER_S + ZEROING_S - 1e-3


def test_optimizer_time_is_saved_and_loaded(tmp_path):
    profile = Profile(units=["b", "a"], bp={"b": 1.0, "a": 2.0}, comm={"b": 0.5, "a": 0.5},
                      step_time=0.3, optimizer_time=0.1, optimizer_call_time=0.002)
    save_profile(profile, tmp_path / "p")
    back = load_profile(tmp_path / "p")
    assert (back.step_time, back.optimizer_time) == (pytest.approx(0.3), pytest.approx(0.1))
    assert back.optimizer_call_time == pytest.approx(0.002)
    assert back.optimizer_seconds == pytest.approx(0.1)
    save_profile(Profile(units=["a"], bp={"a": 1.0}, comm={"a": 0.5}, step_time=0.3), tmp_path / "q")
    older = load_profile(tmp_path / "q")
    assert older.optimizer_time is None and older.optimizer_seconds == pytest.approx(0.3)  # all of step_time
    assert older.optimizer_call_time is None


def test_a_slow_workers_passes_wait_as_trainings_and_keep_their_own_times(monkeypatch):
    """At speed 0.5 each forward and backward is followed by a wait (here a fixed 50 ms, far
    longer than these passes): the profile's passes exclude the waits."""
    waits = []

    def stretch(measured, speed):
        waits.append(speed)
        time.sleep(0.05)
        return 0.05

    monkeypatch.setattr(profiler, "stretch", stretch)
    model, loss_fn, engine = two_layers()
    profile = measure_profile(engine, engine.comm, torch.optim.SGD(model.parameters(), lr=0.01), loss_fn,
                              iterations=2, comm_repeats=0, speed=lambda t: 0.5)
    assert waits == [0.5] * 2 * (2 + 2 * 2)  # forward and backward of every pass, warm-up included
    assert profile.meta["forward_total"] + profile.meta["backward_total"] + profile.step_time < 0.05
    assert max(profile.meta["compute_by_rank"][0]) < 0.05
