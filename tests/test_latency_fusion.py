"""Latency and fusion: a paced link's cost per collective (its alpha plus an all-reduce's
latency hops, the ring model's) is what DreamDDP's scheduler charges each collective, so at a
long round trip it fuses consecutive units of one iteration into one collective, and with
``algo.fuse=false`` it does not."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dreamddp.algorithms.dreamddp import DreamDDP
from dreamddp.comm.cost import collective_time
from dreamddp.comm.links.emulated import EmulatedLink
from dreamddp.schedule.profile import Profile
from dreamddp.warmup import Warmup


def _warmup(link, world: int = 2) -> Warmup:
    return Warmup(cfg=None, engine=None, comm=SimpleNamespace(link=link, world_size=world), optimizer=None,
                  loss_fn=None, recorder=None)


def test_the_cost_of_a_collective_is_alpha_plus_the_latency_hops():
    link = EmulatedLink(0.1, latency_ms=40.0, alpha_s=0.002)
    hops = collective_time("all_reduce", 0, 4, 0.1, 0.040)
    assert hops == pytest.approx(2 * 3 * 0.040)  # a ring all-reduce: 2(n-1) steps, each a round of latency
    assert _warmup(link, 4).link_alpha == pytest.approx(0.002 + hops)
    assert _warmup(EmulatedLink(0.1, alpha_s=0.002)).link_alpha == pytest.approx(0.002)


def _profile(n: int = 12) -> Profile:
    units = [f"u{i}" for i in range(n)]
    return Profile(units=units, bp={u: 0.010 for u in units}, comm={u: 0.024 for u in units},
                   fwd={u: 0.005 for u in units}, nbytes={u: 50_000 for u in units}, step_time=0.002)


def test_a_costly_collective_makes_the_scheduler_fuse_units_and_fuse_false_does_not():
    cfg = DreamDDP.Config(name="dreamddp", H=3)
    fused = DreamDDP.setup_from_profile(cfg, _profile(), alpha=0.020)["schedule"]
    assert fused.get("collectives") and any(a != b for its in fused["collectives"] for a, b in its)
    apart = DreamDDP.setup_from_profile(DreamDDP.Config(name="dreamddp", H=3, fuse=False), _profile(), alpha=0.020)["schedule"]
    assert not apart.get("collectives")  # one collective per unit


def _finish(ready, bandwidth, groups, alpha) -> float:
    t = 0.0
    for a, b in groups:
        t = max(t, ready[b]) + alpha + sum(bandwidth[a:b + 1])
    return t


def _groupings(synced: list[int]):
    """Every split of the synced units into groups of consecutive indices, by brute force."""
    if not synced:
        yield []
        return
    for k in range(1, len(synced) + 1):
        head = synced[:k]
        if head[-1] - head[0] != k - 1:
            break
        for rest in _groupings(synced[k:]):
            yield [(head[0], head[-1]), *rest]


@pytest.mark.parametrize("seed", range(30))
def test_the_fused_grouping_drains_first_of_every_grouping(seed):
    import numpy as np

    from dreamddp.schedule.fuse import fuse_iteration

    rng = np.random.default_rng(seed)
    n = 7
    ready = np.cumsum(rng.uniform(0.001, 0.02, n))
    bandwidth = rng.uniform(0.0, 0.02, n)
    synced = sorted(rng.choice(n, size=int(rng.integers(1, n + 1)), replace=False).tolist())
    alpha = float(rng.choice([0.0005, 0.005, 0.05]))
    got = fuse_iteration(ready, bandwidth, synced, alpha)
    best = min(_finish(ready, bandwidth, g, alpha) for g in _groupings(synced))
    assert _finish(ready, bandwidth, got, alpha) == pytest.approx(best, abs=1e-12)
    assert [i for a, b in got for i in range(a, b + 1)] == synced  # every synced unit once, nothing else
