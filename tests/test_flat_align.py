"""The flat buffers with every parameter on a 512-byte boundary (CUDA's layout) train to
the same bits as the packed layout (the CPU's) under every algorithm, on real gloo workers."""

from __future__ import annotations

import pytest
import torch

from dist_util import run_workers
from dreamddp.algorithms import ALGORITHMS, build_algorithm
from dreamddp.comm.communicator import Communicator
from dreamddp.engine.divergence import divergence
from dreamddp.engine.engine import PartialSyncEngine
from dreamddp.engine.flat import FlatModel, default_align_bytes
from dreamddp.engine.units import enumerate_units
from dreamddp.schedule.profile import Profile
from engine_fixtures import engine_step, make_opt, small_model

# every algorithm on the engine, and the variants that move data differently (buckets, shards,
# fragments, deferred merges); not e3m0 quantisation, whose blocks the padding shifts
VARIANTS = [("ssgd", {}), ("ascwfbp", {"bucket_mb": 1e-9}), ("dear", {"bucket_mb": 700 / 2**20}),
            ("flsgd", {}), ("plsgd_enp", {}), ("streaming_diloco", {"fragments": 2, "tau": 1}),
            ("dreamddp", {}), ("dreamddp", {"overlap_forward": True}), ("dreamddp", {"merge_delay": 1}),
            ("dreamddp", {"scheduler": "general"}), ("nosync", {})]
STEPS = 7


def _profile(units) -> Profile:
    names = [u.name for u in units]
    return Profile(units=names, bp={n: 0.1 * (i + 1) for i, n in enumerate(names)},
                   comm={n: 0.3 for n in names}, fwd={n: 0.05 for n in names},
                   nbytes={u.name: u.nbytes for u in units}, step_time=0.01)


def _train(rank: int, name: str, options: dict, align: int):
    model = small_model()
    units = enumerate_units(model)
    cfg = ALGORITHMS.lookup(name).Config(name=name, H=2, **options)
    algo = build_algorithm(cfg, ALGORITHMS.lookup(name).setup_from_profile(cfg, _profile(units), 0.0))
    engine = PartialSyncEngine(model, units, Communicator(), algo, align_bytes=align)
    opt, sched = make_opt("sgd", model)
    for t in range(STEPS):  # no clipping: a norm over the buffer sums in an order its layout sets
        engine_step(engine, model, opt, t, rank, sched=sched)
    engine.flush()
    engine.close()
    flat = engine.flat
    base = flat.params.data_ptr()
    padding = torch.ones(flat.params.numel(), dtype=torch.bool)
    for p in model.parameters():
        at = (p.data_ptr() - base) // p.element_size()
        padding[at : at + p.numel()] = False
    return {"params": [p.detach().clone() for p in model.parameters()],
            "aligned": all((p.data_ptr() - base) % max(align, 1) == 0 for p in model.parameters()),
            "padding_zero": bool((flat.params[padding] == 0).all() and (flat.grads[padding] == 0).all()),
            "padded": int(padding.sum()), "layout": engine.layout.nbytes, "spans": flat.unit_nbytes,
            "divergence": divergence(flat)["per_unit"]}


def _both_layouts(rank: int, world: int) -> list:
    return [(name, options, _train(rank, name, options, 0), _train(rank, name, options, 512))
            for name, options in VARIANTS]


def test_aligned_and_packed_buffers_train_to_the_same_bits():
    for results in run_workers(_both_layouts, 2):
        for name, options, packed, aligned in results:
            what = f"{name} {options}"
            assert packed["padded"] == 0 and aligned["padded"] > 0, what
            assert aligned["aligned"] and aligned["padding_zero"], what
            assert aligned["layout"] == aligned["spans"], what  # the plans see the buffers' own spans
            assert all(torch.equal(a, b) for a, b in zip(packed["params"], aligned["params"])), what
            assert aligned["divergence"] == pytest.approx(packed["divergence"], rel=1e-6), what  # padding left out


def test_cuda_buffers_are_aligned_as_the_allocator_aligns_and_cpu_ones_packed():
    assert default_align_bytes(torch.device("cuda")) == 512 and default_align_bytes(torch.device("cpu")) == 0
    model = small_model()
    flat = FlatModel(enumerate_units(model), 512)
    # backward order, each unit's span a whole number of 512-byte steps
    assert all(n % 512 == 0 for n in flat.unit_nbytes) and flat.offsets[-1] * 4 == sum(flat.unit_nbytes)
