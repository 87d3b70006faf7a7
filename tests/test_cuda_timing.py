"""CUDA: stamps are taken after the device finished, and workers sharing one GPU communicate.

Runs where a GPU is present, skips elsewhere (CI has none; results/gpu/ holds
this module's output on the lent GPU).  References: CUDA events, which time the
device itself, and the collectives' definitions on every rank's known inputs.
"""

from __future__ import annotations

import statistics
import time

import pytest
import torch

from dreamddp.algorithms import build_algorithm
from dreamddp.clock import anchor_for, clock_for
from dreamddp.comm.communicator import Communicator
from dreamddp.comm.links.emulated import EmulatedLink
from dreamddp.comm.fake import FakeCommunicator
from dreamddp.engine.engine import PartialSyncEngine
from dreamddp.models import build_model, model_units
from dreamddp.models.tasks import compute_loss
from dreamddp.warmup.profiler import measure_profile
from dist_util import run_workers
from engine_fixtures import algo_cfg

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]


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


def test_unit_backward_times_sum_to_a_backward_timed_the_same_way_without_marks():
    """Per-unit backward times (the engine's gradient-ready marks in the profiler) are
    positive, marked in backward order, and sum to within 10% of a whole backward pass timed
    the way the profiler and the trainer time it (the device synchronised at its start and
    end: ``engine.clock``) on passes without marks (GPT-2 124M, 75 units): the profile is not
    stretched by its own instruments.  Passes with the marks and CUDA events on the unmarked
    ones print beside it.  History (results/gpu/README.md): synchronising the device at every
    unit summed to 1.53x the pass on an H200; event marks 1.04 and 1.06 of events on two
    machines, then 1.19 and 1.16 on two whose host barely kept ahead of the device, where the
    marked passes themselves ran 14% longer (run 6): the profiler now takes its totals from
    unmarked passes and only the shares from marked ones."""
    device = torch.device("cuda")
    torch.manual_seed(0)
    model = build_model("gpt2", "paper").to(device)
    sample = torch.randint(50257, (4, 256), device=device)
    loss_fn = lambda: compute_loss("lm", model, sample)  # noqa: E731
    units = model_units(model, loss_fn)
    engine = PartialSyncEngine(model, units, FakeCommunicator(world_size=1), build_algorithm(algo_cfg("nosync")))
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    # The first profile in a process is printed, not checked: on one freshly started H100 (run 9)
    # its passes ran 1.31x the same passes a moment later, marks or not (on the next machine they
    # agreed); the claim is about the marks, so it is held on the profile taken after it.
    cold = measure_profile(engine, engine.comm, opt, loss_fn, iterations=5, comm_repeats=0)
    profile = measure_profile(engine, engine.comm, opt, loss_fn, iterations=5, comm_repeats=0)
    assert all(profile.bp[u] > 0 for u in profile.units)
    for name, p in (("cold", cold), ("warm", profile)):
        passes = " ".join(f"{s * 1e3:.2f}" for s in p.meta["compute_by_rank"][0])
        print(f"{name} profile: backward {p.meta['backward_total'] * 1e3:.2f} ms, unmarked passes (ms) {passes}")

    clocked = {True: [], False: []}
    by_events = []
    for t in range(16):
        marked = t % 2 == 1
        engine.sample_every = 1 if marked else 0
        engine.begin_iteration(t)
        loss = loss_fn()
        t1 = engine.clock()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        loss.backward()
        end.record()
        t2 = engine.clock()
        engine.end_backward()
        engine.step(opt)
        stats = engine.after_step()
        torch.cuda.synchronize()
        if marked:  # backward order: the engine's units are in it
            assert stats.unit_ready == sorted(stats.unit_ready) and stats.unit_ready[0] > 0
        if t >= 4:
            clocked[marked].append(t2 - t1)
            if not marked:
                by_events.append(start.elapsed_time(end) / 1e3)
    summed = sum(profile.bp.values())
    unmarked, with_marks = statistics.median(clocked[False]), statistics.median(clocked[True])
    device_s = statistics.median(by_events)
    print(f"per-unit backward sum {summed * 1e3:.2f} ms, unmarked backward {unmarked * 1e3:.2f} ms "
          f"(ratio {summed / unmarked:.3f}), by CUDA events {device_s * 1e3:.2f} ms "
          f"(ratio {summed / device_s:.3f}), marked backward {with_marks * 1e3:.2f} ms "
          f"({with_marks / unmarked:.3f} x unmarked), {len(profile.units)} units")
    assert abs(summed / unmarked - 1) <= 0.10


def _collectives_on_one_gpu(rank: int, world: int) -> dict:
    """Every collective the algorithms launch, on CUDA tensors of workers sharing GPU 0
    over gloo (which moves CUDA tensors for all-reduce and broadcast only)."""
    from dreamddp.comm.communicator import Communicator

    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    comm = Communicator()
    k = 1000  # elements per rank's shard
    xs = [torch.randn(k * world, generator=torch.Generator().manual_seed(7 + r)).to(device) for r in range(world)]
    shards = [slice(r * k, (r + 1) * k) for r in range(world)]
    mean = torch.stack(xs).mean(0)
    x = xs[rank].clone()
    comm.all_reduce_avg(x).wait()
    out = torch.empty(k, device=device)
    comm.reduce_scatter_avg(xs[rank].clone(), out).wait()
    gathered = torch.empty(k * world, device=device)
    comm.all_gather(gathered, xs[rank][shards[rank]].clone()).wait()
    shard = shards[rank]
    want_gather = torch.cat([xs[r][shards[r]] for r in range(world)])
    return {"devices": {x.device.type, out.device.type, gathered.device.type},
            "all_reduce": (x - mean).abs().max().item(),
            "reduce_scatter": (out - mean[shard]).abs().max().item(),
            "all_gather": (gathered - want_gather).abs().max().item()}


def test_workers_sharing_one_gpu_communicate_cuda_tensors_over_gloo():
    for result in run_workers(_collectives_on_one_gpu, 2):
        assert result["devices"] == {"cuda"}
        assert result["all_reduce"] < 1e-6 and result["reduce_scatter"] < 1e-6 and result["all_gather"] == 0.0


def _reserved_when_the_device_gets_there(rank, world):
    device = torch.device("cuda")
    comm = Communicator(link=EmulatedLink(gbps=10.0, alpha_s=0.0))
    # The second pass is the measured one. Run once (H100, run 4 of results/gpu), the host
    # launched the all-reduce 0.26 ms after the device had finished its queue: something in a
    # first pass held it back (a kernel's first launch loading its module, we suppose; not
    # measured), where the benchmarks' later iterations ran 13 ms ahead (git history: results/gpu/host_lead.md).
    _queue_then_reduce(comm, device)
    return _queue_then_reduce(comm, device)


def _queue_then_reduce(comm, device):
    """(link start less launch, device-ready less launch) of an all-reduce launched behind
    tens of ms of queued device work."""
    x = torch.randn(4096, 4096, device=device)
    grad = torch.zeros(1000, device=device)
    clock_for(device)()  # a synchronised stamp: the anchor the marks read through
    for _ in range(40):  # tens of ms queued on the device ahead of the launch
        x = x @ x / 4096
    grad += x[0, :1000]
    ready = torch.cuda.Event(enable_timing=True)
    ready.record()
    handle = comm.all_reduce_avg(grad)
    launch = handle.record.launch
    handle.wait()
    anchor = anchor_for(device)
    ready_host = anchor.host + anchor.event.elapsed_time(ready) / 1e3
    return handle.record.start - launch, ready_host - launch


def test_a_paced_link_starts_a_cuda_collective_when_the_device_gets_there():
    """The host queued the all-reduce tens of ms before the device made its input: the
    emulated link's transfer starts then, not at the launch (dreamddp/comm/ready.py)."""
    for started, ready in run_workers(_reserved_when_the_device_gets_there, 2):
        assert ready > 0.005  # the host ran ahead
        assert started >= ready - 0.001 and started <= ready + 0.005
