"""Timing on CUDA: stamps are taken after the device finished, not when the host queued.

Runs where a GPU is present, skips elsewhere.  Reference: CUDA events, which
time the device itself.
"""

from __future__ import annotations

import time

import pytest
import torch

from dreamddp.algorithms import build_algorithm
from dreamddp.clock import clock_for
from dreamddp.comm.fake import FakeCommunicator
from dreamddp.engine.engine import PartialSyncEngine
from dreamddp.models import build_model, model_units
from dreamddp.models.tasks import compute_loss
from dreamddp.warmup.profiler import measure_profile
from engine_fixtures import algo_cfg

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def test_clock_waits_for_the_device():
    device = torch.device("cuda")
    x = torch.randn(4096, 4096, device=device)
    clock = clock_for(device)
    start_event, end_event = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = clock()
    start_event.record()
    for _ in range(20):
        x = x @ x / 4096
    end_event.record()
    queued = time.perf_counter() - t0  # host dispatch only
    t1 = clock()
    device_s = start_event.elapsed_time(end_event) / 1e3
    assert t1 - t0 >= 0.9 * device_s and device_s > queued


def test_engine_and_profiler_times_on_cuda_are_positive_and_ordered():
    device = torch.device("cuda")
    torch.manual_seed(0)
    model = build_model("gpt2", "tiny").to(device)
    sample = torch.randint(8192, (4, 64), device=device)
    units = model_units(model, lambda: compute_loss("lm", model, sample))
    engine = PartialSyncEngine(model, units, FakeCommunicator(world_size=1), build_algorithm(algo_cfg("nosync")))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    profile = measure_profile(engine, engine.comm, opt, lambda: compute_loss("lm", model, sample), iterations=3,
                              comm_repeats=0)
    assert all(profile.bp[u] > 0 for u in profile.units)
    assert all(profile.fwd[u] > 0 for u in profile.units)
    engine.sample_every = 1
    engine.begin_iteration(0)
    compute_loss("lm", model, sample).backward()
    engine.end_backward()
    engine.step(opt)
    stats = engine.after_step()
    assert stats.unit_ready == sorted(stats.unit_ready)
    assert 0 < stats.unit_ready[-1] <= stats.backward_end - stats.start <= stats.end - stats.start
