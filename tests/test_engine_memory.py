"""No algorithm allocates a copy of the model: measured with torch's memory profiler.

Each algorithm runs a few iterations in a one-worker gloo group; the bytes
torch allocates during backward + synchronisation + step are compared with
those of the same iteration without any synchronisation (NoSync).  The extra
must be tiny next to the model (it is tens of bytes: handles and views).
Allocations made inside the collective library itself are outside torch's
allocator and not counted; they belong to the transport, as with NCCL.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
from torch import nn

from dist_util import free_port
from dreamddp.algorithms.nosync import NoSync
from dreamddp.comm.communicator import Communicator
from dreamddp.engine.engine import PartialSyncEngine
from dreamddp.engine.units import enumerate_units
from engine_fixtures import build


@pytest.fixture(scope="module")
def one_worker_group():
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    yield
    dist.barrier()
    dist.destroy_process_group()


def allocated_bytes(algorithm) -> tuple[int, int]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 1024), nn.Tanh(), nn.Linear(1024, 1024), nn.Linear(1024, 4))
    engine = PartialSyncEngine(model, enumerate_units(model), Communicator(), algorithm)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)  # stateless: no optimizer buffers
    x, y = torch.randn(8, 256), torch.randn(8, 4)
    for t in range(3):  # the last iteration syncs for every algorithm below
        engine.begin_iteration(t)
        loss = nn.functional.mse_loss(model(x), y)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
            loss.backward()
            engine.end_backward()
            engine.step(opt)
            engine.after_step()
    assert engine.stats.collectives >= 1 or isinstance(algorithm, NoSync)
    return allocated_during(prof), engine.flat.params.numel() * 4


def allocated_during(prof) -> int:
    """Bytes allocated on the CPU while profiling, each allocation counted once.

    The raw allocation records are summed, not the per-op totals: torch's
    profiler attributes an allocation to every op whose interval covers it on
    any thread, so the gloo thread's all_reduce op would also be charged with
    a gradient the main thread allocates meanwhile.
    """
    records = prof.profiler.kineto_results.events()
    return sum(r.nbytes() for r in records if r.name() == "[memory]" and r.nbytes() > 0)


@pytest.mark.parametrize(
    "name, kw", [("ssgd", {}), ("ascwfbp", {"bucket_mb": 0.5}), ("flsgd", {"H": 3}), ("plsgd_enp", {"H": 3})]
)
def test_algorithm_allocates_no_model_copy(one_worker_group, name, kw):
    base, model_bytes = allocated_bytes(build("nosync"))
    used, _ = allocated_bytes(build(name, **kw))
    assert used - base < 0.01 * model_bytes, f"{name} allocated {used - base} extra bytes (model: {model_bytes})"
