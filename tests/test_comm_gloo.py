"""Communicator over real gloo process groups (2 and 4 spawned CPU workers).

Workers assert inside themselves; a failing assertion surfaces through
torch.multiprocessing.spawn as ProcessRaisedException with the worker's
traceback.  Timings use an emulated link slow enough (0.1 Gbit/s) that pacing,
not loopback compute, dominates, so the tolerances survive a loaded machine.
"""

import socket
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from dreamddp.comm.communicator import Communicator
from dreamddp.comm.cost import collective_time
from dreamddp.comm.links.emulated import EmulatedLink


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(fn, world: int) -> None:
    # forkserver = spawn semantics (fresh, thread-free processes), but torch is
    # imported once in the server instead of once per worker per test, which on
    # a loaded 2-core machine is most of the runtime.
    mp.set_forkserver_preload(["torch", "torch.distributed", "dreamddp.comm", __name__])
    mp.start_processes(
        _entry, args=(fn, world, _free_port()), nprocs=world, join=True, start_method="forkserver"
    )


def _entry(rank: int, fn, world: int, port: int) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        fn(rank, world)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _inputs(world: int, n: int, salt: int) -> list[torch.Tensor]:
    """Every rank can rebuild every rank's input, so references are local."""
    return [torch.randn(n, generator=torch.Generator().manual_seed(salt + r)) for r in range(world)]


def _gather_all(t: torch.Tensor, world: int) -> list[torch.Tensor]:
    out = [torch.empty_like(t) for _ in range(world)]
    dist.all_gather(out, t)
    return out


def _correctness(rank: int, world: int) -> None:
    comm = Communicator()
    assert (comm.rank, comm.world_size, comm.backend) == (rank, world, "gloo")
    n = 1000 * world + 4 * world  # not a power of two, divisible by world
    xs = _inputs(world, n, 100)
    mean_ref = torch.stack(xs).mean(dim=0)

    # all_reduce_avg: the mean, bitwise identical on every rank, divided once.
    x = xs[rank].clone()
    h = comm.all_reduce_avg(x, tag="ar")
    assert comm.pending() == 1
    assert h.wait() >= 0.0 and h.done()
    assert comm.pending() == 0
    torch.testing.assert_close(x, mean_ref, rtol=1e-6, atol=1e-6)
    assert all(torch.equal(x, other) for other in _gather_all(x, world))
    assert h.wait() == 0.0
    torch.testing.assert_close(x, mean_ref, rtol=1e-6, atol=1e-6)  # not divided twice

    # Exact case: small integers average without rounding.
    e = torch.arange(8, dtype=torch.float64) * (rank + 1)
    comm.all_reduce_avg(e).wait()
    assert torch.equal(e, torch.arange(8, dtype=torch.float64) * (world + 1) / 2)

    # reduce_scatter_avg: this rank's contiguous chunk of the mean.
    flat = _inputs(world, n, 200)[rank]
    rs_ref = torch.stack(_inputs(world, n, 200)).mean(dim=0)
    shard = torch.empty(n // world)
    comm.reduce_scatter_avg(flat, shard, tag="rs").wait()
    torch.testing.assert_close(shard, rs_ref.chunk(world)[rank], rtol=1e-6, atol=1e-6)

    # all_gather of the shards reassembles the all-reduced mean, identical everywhere.
    full = torch.empty(n)
    comm.all_gather(full, shard, tag="ag").wait()
    ar = _inputs(world, n, 200)[rank]
    comm.all_reduce_avg(ar).wait()
    torch.testing.assert_close(full, ar, rtol=1e-6, atol=1e-6)
    assert all(torch.equal(full, other) for other in _gather_all(full, world))

    # all_gather order: chunk r of the output is rank r's shard, exactly.
    out = torch.empty(3 * world)
    comm.all_gather(out, torch.full((3,), float(rank))).wait()
    assert torch.equal(out, torch.arange(world, dtype=torch.float32).repeat_interleave(3))

    # Several in flight at once, waited out of launch order.
    bufs = [torch.full((50,), float(rank + k)) for k in range(3)]
    handles = [comm.all_reduce_avg(b, tag=f"b{k}") for k, b in enumerate(bufs)]
    assert comm.pending() == 3
    for hd in reversed(handles):
        hd.wait()
    for k, b in enumerate(bufs):
        assert torch.equal(b, torch.full((50,), (world - 1) / 2 + k))

    recs = comm.drain()
    assert [r.tag for r in recs] == ["ar", "", "rs", "ag", "", "", "b0", "b1", "b2"]
    assert recs[0].nbytes == 4 * n and recs[0].wire_bytes == 2 * (world - 1) / world * 4 * n
    assert recs[2].kind == "reduce_scatter" and recs[2].nbytes == 4 * n
    assert recs[3].kind == "all_gather" and recs[3].wire_bytes == (world - 1) / world * 4 * n
    assert all(r.complete is not None and r.start == r.deadline == r.launch for r in recs)
    assert comm.drain() == []

    # Control traffic: blocking, unaccounted.
    b = torch.full((4,), float(rank))
    comm.broadcast(b, src=world - 1)
    assert torch.equal(b, torch.full((4,), float(world - 1)))
    m = torch.tensor([float(rank), -float(rank)])
    comm.all_reduce_max(m)
    assert torch.equal(m, torch.tensor([float(world - 1), 0.0]))
    assert comm.drain() == [] and comm.pending() == 0

    # Bad input fails before anything is sent (so no rank hangs).
    for call, msg in [
        (lambda: comm.reduce_scatter_avg(torch.zeros(n + 1), torch.zeros(n // world)), "flat: numel"),
        (lambda: comm.all_gather(torch.zeros(n), torch.zeros(n)), "out: numel"),
        (lambda: comm.all_reduce_avg(torch.zeros(4, dtype=torch.int32)), "floating-point"),
        (lambda: comm.broadcast(torch.zeros(1), src=world), "src"),
    ]:
        with pytest.raises(ValueError, match=msg):
            call()


@pytest.mark.parametrize("world", [2, 4])
def test_collectives_match_references(world):
    _run(_correctness, world)


def _correctness_via_host(rank: int, world: int) -> None:
    # The path gloo takes for CUDA tensors of workers sharing a GPU (reduce-scatter and
    # all-gather through host copies), taken here for every tensor.
    Communicator._via_host = lambda self, t: True
    _correctness(rank, world)


def test_host_staged_collectives_match_references():
    _run(_correctness_via_host, 2)


GBPS = 0.1
NBYTES = 4_000_000  # 1M float32
MODEL = collective_time("all_reduce", NBYTES, 2, GBPS)  # 0.32 s on 2 workers


def _within(wall: float, modelled: float) -> None:
    # Never early; the upper bound only has to tell pacing once from pacing
    # twice (or serialising what should overlap), with room for a loaded box.
    assert modelled <= wall <= 1.5 * modelled, f"wall {wall:.4f}s vs modelled {modelled:.4f}s"


def _timing(rank: int, world: int) -> None:
    comm = Communicator(link=EmulatedLink(gbps=GBPS, alpha_s=0.0))
    a, b = torch.ones(NBYTES // 4), torch.ones(NBYTES // 4)

    # A lone collective takes the modelled time, launch to wait() return.
    dist.barrier()
    t0 = time.perf_counter()
    h = comm.all_reduce_avg(a, tag="lone")
    blocked = h.wait()
    _within(time.perf_counter() - t0, MODEL)
    rec = h.record
    assert rec.blocked == blocked and rec.complete >= rec.deadline
    assert (rec.nbytes, rec.wire_bytes) == (NBYTES, float(NBYTES))
    assert rec.deadline - rec.start == pytest.approx(MODEL)

    # Two launched back to back share the FIFO wire: the second ends at ~ the sum.
    comm.link.reset()
    dist.barrier()
    t0 = time.perf_counter()
    h1, h2 = comm.all_reduce_avg(a, tag="first"), comm.all_reduce_avg(b, tag="second")
    assert h2.record.launch < h1.record.deadline
    assert h2.record.start == h1.record.deadline
    h2.wait()
    _within(time.perf_counter() - t0, 2 * MODEL)
    assert h1.done()
    h1.wait()

    # Reduce-scatter then all-gather: each half the all-reduce time on 2 workers.
    comm.link.reset()
    dist.barrier()
    shard = torch.empty(NBYTES // 8)
    t0 = time.perf_counter()
    comm.reduce_scatter_avg(a, shard).wait()
    comm.all_gather(b, shard).wait()
    _within(time.perf_counter() - t0, MODEL)

    # Compute that overlaps the paced collective hides it: wait() barely blocks.
    comm.link.reset()
    dist.barrier()
    h = comm.all_reduce_avg(a, tag="hidden")
    time.sleep(MODEL)  # stand-in for backward compute
    blocked = h.wait()
    assert blocked < 0.25 * MODEL, f"blocked {blocked:.4f}s although compute covered the transfer"

    recs = comm.drain()
    assert [r.tag for r in recs] == ["lone", "first", "second", "", "", "hidden"]
    assert [r.kind for r in recs[3:5]] == ["reduce_scatter", "all_gather"]
    assert all(r.complete is not None and r.launch <= r.start < r.deadline <= r.complete for r in recs)
    assert all(r.blocked >= 0.0 for r in recs) and comm.pending() == 0


def test_emulated_link_paces_real_collectives():
    _run(_timing, 2)