"""One description of communication: the engine's run and the simulator sync the same units.

For every registered algorithm (and the toy of tests/test_algorithm_plugin.py,
registered from that test file) on a few profiles and window lengths: the
engine runs the algorithm on a real model against a fake communicator, the
simulator binds the algorithm to a torch-free layout of a profile of that
model's units, and per iteration both must launch the same collectives (units
and kind), and the fake communicator must have carried exactly those.  And
where each payload lies, as the simulator's deferred carrier groups them
(``payload_place``), is where the engine's tensors lie: both group an
iteration's collectives into the same real ones (comm/carry.py).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
from torch import nn

from dreamddp.algorithms import ALGORITHMS, build_algorithm, register_algorithm
from dreamddp.comm.carry import SMALL_BYTES, Slot, carried
from dreamddp.comm.fake import FakeCommunicator
from dreamddp.engine.units import enumerate_units
from dreamddp.prediction import layout_of, simulate
from dreamddp.schedule.profile import Profile
from test_algorithm_plugin import EveryK

# algorithm -> option sets worth telling apart (buckets, fragments, schedulers, variants)
VARIANTS = {
    "ssgd": [{}],
    "ascwfbp": [{"bucket_mb": 1e-9}, {"bucket_mb": 3000 / 2**20}],
    "dear": [{"bucket_mb": 1e-9}, {"bucket_mb": 3000 / 2**20}],
    "flsgd": [{}],
    "flsgd_timed": [{}],
    "plsgd_enp": [{}],
    "streaming_diloco": [{"fragments": 2, "tau": 1}, {"fragments": 1, "tau": 0, "compress": "e3m0"}],
    "dreamddp": [{"scheduler": "dreamddp"}, {"scheduler": "optimal", "bubble_fill": False},
                 {"scheduler": "general"}, {"overlap_forward": True}, {"merge_delay": 1},
                 {"merge_delay": 2, "overlap_forward": True}, {"scheduler": "general", "merge_delay": 1}],
    "nosync": [{}],
    "plain": [{}],
    "every_k": [{"k": 2}],
}


@pytest.fixture(scope="module", autouse=True)
def toy_registered():
    register_algorithm(EveryK)
    yield
    del ALGORITHMS[EveryK.name]


def model() -> nn.Module:
    """Eight units of very different sizes (backward order: output side first)."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 40), nn.Tanh(), nn.LayerNorm(40), nn.Linear(40, 8), nn.Linear(8, 24),
                         nn.LayerNorm(24), nn.Linear(24, 24), nn.Linear(24, 30), nn.Linear(30, 3))


def profile_of(units, seed: int) -> Profile:
    """Random compute and comm seconds over the model's units (bytes are the units')."""
    rng = np.random.default_rng(seed)
    names = [u.name for u in units]
    return Profile(units=names, bp=dict(zip(names, rng.uniform(0.1, 1.0, len(names)).tolist())),
                   comm=dict(zip(names, rng.uniform(0.05, 3.0, len(names)).tolist())),
                   fwd=dict(zip(names, rng.uniform(0.05, 0.5, len(names)).tolist())),
                   nbytes={u.name: u.nbytes for u in units}, step_time=0.1)


def engine_ops(cfg, profile, world: int, iterations: int, grad_clip: float = 0.0):
    """Per iteration: the ops the engine launched, and the kinds the fake communicator carried."""
    net = model()
    units = enumerate_units(net)
    cls = ALGORITHMS.lookup(cfg.name)
    algo = build_algorithm(cfg, cls.setup_from_profile(cfg, profile, 0.0))  # as the warm-up would make it
    comm = FakeCommunicator(world_size=world)
    engine, train_model = cls.make_engine(net, units, comm, None, cfg=cfg, sample_every=0, grad_clip=grad_clip)
    engine.set_algorithm(algo)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(1)
    launched, kinds, grouped = [], [], []
    for t in range(iterations):
        before = len(comm.calls)
        engine.begin_iteration(t)
        x, y = torch.randn(5, 6, generator=g), torch.randn(5, 3, generator=g)
        nn.functional.mse_loss(train_model(x), y).backward()
        engine.end_backward()
        engine.step(opt)
        stats = engine.after_step()
        calls = comm.calls[before:]
        launched.append(stats.ops)
        kinds.append(Counter(c.kind for c in calls))
        grouped.append(_grouping(stats.ops, calls, algo, getattr(engine, "layout", None), t))  # plain: no engine
    return launched, kinds, grouped


def _grouping(ops, calls, algo, layout, t):
    """Per packing threshold (the carrier's, and none), the real collectives (from the tensors the
    engine sent, from ``payload_place``): each a sorted list of the sets of ops that go as one;
    None where an op sent more than one call."""
    if not ops or len(calls) != len(ops):
        return None
    keys = [(tuple(op.units), op.collective) for op in ops]
    assert len(set(keys)) == len(keys)
    real = [Slot(c.kind, c.storage, c.offset, c.nbytes) for c in calls]
    placed = [Slot(op.collective, *algo.payload_place(op, t, layout), layout.op_bytes(op)) for op in ops]

    def as_sets(slots, small_bytes):
        return sorted(sorted(keys[i] for run in r.runs for i in run) for r in carried(slots, small_bytes))
    # these units are all small, so they all go packed; without packing, adjacency alone decides
    return [(as_sets(real, small), as_sets(placed, small)) for small in (SMALL_BYTES, 0)]


def signature(ops) -> Counter:
    return Counter((tuple(op.units), op.collective) for op in ops)


CASES = [(name, opts) for name, variants in VARIANTS.items() for opts in variants]
CLIP = 0.5  # every case runs unclipped and clipped (plans may sync for the norm: DeAR)


@pytest.mark.parametrize("grad_clip", [0.0, CLIP])
@pytest.mark.parametrize("H", [2, 3, 5])
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name,options", CASES, ids=[f"{n}-{i}" for n, v in VARIANTS.items() for i in range(len(v))])
def test_engine_and_simulator_sync_the_same_units(name, options, H, seed, grad_clip):
    world, n = 2, 2 * H
    units = enumerate_units(model())
    profile = profile_of(units, seed)
    if "merge_delay" in options:  # below H
        options = {**options, "merge_delay": min(options["merge_delay"], H - 1)}
    cfg = ALGORITHMS.lookup(name).Config(name=name, H=H, **options)
    launched, carried, grouped = engine_ops(cfg, profile, world, H + n, grad_clip)
    simulated = simulate(cfg, profile, world=world, iterations=n, grad_clip=grad_clip)
    assert len(simulated.ops) == n
    for k, sim_ops in enumerate(simulated.ops):
        t = H + k  # the simulator drops one warm-up window
        assert signature(launched[t]) == signature(sim_ops), f"iteration {t}"
        assert carried[t] == Counter(op.collective for op in sim_ops), f"iteration {t}: what the link carried"
        for engine_side, placed in grouped[t] or ():
            assert engine_side == placed, f"iteration {t}: real collectives at a wait"


def test_every_registered_algorithm_is_covered():
    assert {n for n, cls in ALGORITHMS.items() if not cls.syncs_itself} == set(VARIANTS)


def test_layout_of_a_profile_is_the_engines_layout():
    net = model()
    units = enumerate_units(net)
    profile = profile_of(units, 0)
    from dreamddp.engine.engine import PartialSyncEngine

    engine = PartialSyncEngine(net, units, FakeCommunicator(world_size=2), build_algorithm(ALGORITHMS["nosync"].Config(name="nosync")))
    ours = layout_of(profile, 2)
    assert (ours.names, ours.nbytes, ours.world) == (engine.layout.names, engine.layout.nbytes, engine.layout.world)
