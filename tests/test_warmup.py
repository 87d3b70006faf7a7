"""What the warm-up hands a scheduler: on a paced link, the link's own model of each all-reduce."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dreamddp.comm.links.emulated import EmulatedLink
from dreamddp.comm.links.ideal import IdealLink
from dreamddp.schedule.profile import Profile
from dreamddp.warmup import Warmup


def _warmup(link, world=4):
    comm = SimpleNamespace(link=link, world_size=world)
    return Warmup(cfg=None, engine=None, comm=comm, optimizer=None, loss_fn=None, recorder=None)


PROFILE = Profile(units=["b", "a"], bp={"a": 1.0, "b": 1.0}, comm={"a": 0.9, "b": 0.004},  # b: skewed by start-up
                  nbytes={"a": 1_000_000, "b": 512})


def test_paced_link_plans_with_its_model():
    link = EmulatedLink(8.0, alpha_s=1e-3)  # 8 Gbit/s: 1 MB on 4 workers = 1.5 ms + alpha
    planned = _warmup(link).planning_profile(PROFILE)
    assert planned.comm["a"] == pytest.approx(1e-3 + 1.5e-3)
    assert planned.comm["b"] == pytest.approx(1e-3 + 1.5 * 512 * 8 / 8e9)
    assert planned.bp == PROFILE.bp and PROFILE.comm["b"] == 0.004  # the measurement itself is kept


def test_unpaced_link_plans_with_the_measurement():
    assert _warmup(IdealLink()).planning_profile(PROFILE) is PROFILE
