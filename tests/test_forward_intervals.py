"""The profile's forward per unit: pre-hook to pre-hook, so work outside the units lands where it runs.

The simulator walks forward unit by unit and lets a forward-completed collective
(DeAR's all-gathers, DreamDDP's overlap_forward averages) wait at its unit's
pre-hook; what runs after the last unit's pre-hook (GPT-2's tied head and the
loss) must be charged there, not spread over every unit.
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
from dreamddp.warmup.profiler import forward_intervals, measure_profile
from engine_fixtures import algo_cfg


def test_intervals_run_from_each_pre_hook_to_the_next_in_time():
    # units 3, 1, 0 ran in that order (unit 2 not at all); the pass took 1 s
    assert forward_intervals([0.5, 0.3, 0.0, 0.1], 1.0, [True, True, False, True]) == [
        pytest.approx(0.5), pytest.approx(0.2), None, pytest.approx(0.3)]
    assert forward_intervals([0.0, 0.0], 1.0, [False, False]) == [None, None]


def test_a_unit_marked_at_the_pass_start_still_counts():
    # on CUDA the first unit's event can read 0.0 s after the start event: it ran, and owns the
    # time to the next pre-hook
    assert forward_intervals([0.0, 0.4], 1.0, ran=[True, True]) == [pytest.approx(0.4), pytest.approx(0.6)]
    assert forward_intervals([0.0, 0.4], 1.0, ran=[False, True]) == [None, pytest.approx(1.0)]


class SlowTail(nn.Module):
    """Parameter-free work after the last unit, as a tied output head and the loss are."""

    def forward(self, x):
        time.sleep(0.03)
        return x


def test_work_after_the_last_unit_is_charged_to_it():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8), SlowTail())
    x = torch.randn(4, 8)
    loss_fn = lambda: model(x).square().mean()  # noqa: E731
    units = model_units(model, loss_fn)
    engine = PartialSyncEngine(model, units, FakeCommunicator(world_size=1), build_algorithm(algo_cfg("nosync")))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    profile = measure_profile(engine, engine.comm, opt, loss_fn, iterations=3, comm_repeats=0)
    last = profile.units[0]  # backward order: the output side first, the last unit to run forward
    assert last == "1"
    total = sum(profile.fwd.values())
    assert total >= 0.03
    # a unit's own time (pre- to post-hook) would have left the 30 ms outside both units and
    # spread them half and half
    assert profile.fwd[last] > 0.9 * total
