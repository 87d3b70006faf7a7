"""Asynchronous, paced, accounted collectives over torch.distributed.

Every accounted collective is launched asynchronously, reserves wire time on
the worker's link from its launch (on CUDA from when the device reaches the
launch, the host running ahead of it: comm/ready.py), and completes in ``Handle.wait()`` only once both
the real collective has finished and the link's deadline has passed.  Pacing
happens in the caller's thread (asleep, or yielding while it holds its core,
below; never blocking gloo's threads), so compute between launch and wait
genuinely overlaps the modelled transfer.

AVG: NCCL has ``ReduceOp.AVG`` and uses it.  gloo does not, so the
collective runs as SUM and ``wait()`` divides by the world size in the
caller's thread; every rank holds bitwise-identical sums, so the means are
bitwise identical too.  Until ``wait()`` returns the buffer holds sums (or
anything), so it must not be read or written between launch and wait.

Reduce-scatter on gloo (and all-gather on 2 gloo ranks) go through ``all_to_all_single``.
gloo's own (``reduce_scatter_tensor``, ``all_gather_into_tensor``; torch 2.13 has both)
are slower than the ring's bytes allow: under tc shaping (56.8 Mbit/s, 7.75 MB) its
reduce-scatter, an all-reduce underneath (bitwise its chunk), took 2.2x the ring formula
on 2 and 4 workers, its all-gather 1.6x on 2 (docs/findings.md, docs/bandwidth.md).  An
exchange moves exactly (n-1)/n of the tensor per rank, the ring's bytes, which is what
the link model charges: world - 1 rounds (to rank + t, from rank - t), each in pieces of
at most EXCHANGE_PIECE_BYTES (comm/exchange.py) on an unpaced link (one big message each way on a
connection runs at half the rate under tc), all launched at once.  The reduce-scatter then sums the received
chunks and its own locally in rank order (rank 0's first) and divides by the world
size, in the handle's post step; the all-gather sends its shard to every rank.  That
sum order differs from gloo's ring all-reduce's for more than 2 ranks (2 operands sum
alike in any order): tests/test_dear.py.  NCCL and any other backend keep their native
collectives.

Holding the core (``bandwidth.hold_core``, where no CPU quota, dreamddp/cpu_share.py,
keeps each worker to its share).  With more workers than cores, a worker
asleep in ``wait()`` lends its core to the others, whose compute then
runs faster the longer this one waits (seen here: S-SGD's backward pass at
half the time of local training's in the same job, 4 workers on 2 cores).  No
cluster works that way: a worker waiting for the network keeps its GPU.
Holding, ``wait()`` polls the clock and yields until the link's deadline
instead of sleeping, so each worker keeps its share of the host through the
modelled transfer, and compute times do not depend on the algorithm.  It
still sleeps while the real collective runs: polling then would starve the
backend's threads (a 4 KB all-reduce after compute took 25 ms instead of 10,
with tails of 140 ms, 4 workers on 2 cores).

The carrier (``bandwidth.carrier``).  On a paced link the real collective only
carries the bytes; the link model says when they arrive.  ``eager`` starts it
at launch, as a NIC would; ``deferred`` (comm/carrier.py) at the first
``wait()``, merged, because on CPU gloo makes little progress while the
workers compute.  The modelled timing is the same either way.
"""

from __future__ import annotations

import functools
import threading
import time
from typing import Callable

import numpy as np
import torch
import torch.distributed as dist

from dreamddp.comm.exchange import Repeated, empty_like_flat, exchange

from dreamddp.comm.carrier import DeferredCarrier
from dreamddp.comm.cost import CARRIERS, QUEUED
from dreamddp.comm.handle import CollectiveRecord, Handle, make_record
from dreamddp.comm.links.base import Link
from dreamddp.comm.links.ideal import IdealLink
from dreamddp.comm.ready import DeviceOrder

# torch 2.13 renamed the flat-tensor variants; the old names still work but warn.
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def _device_sync(t: torch.Tensor) -> Callable[[], None] | None:
    return (lambda: torch.cuda.synchronize(t.device)) if t.is_cuda else None


def _scratch(like: torch.Tensor, numel: int) -> torch.Tensor:
    """Zeros of ``like``'s dtype and device for a probe.  Not training memory: on CPU allocated
    outside torch's allocator, whose profiler (make bench's memory segments) would keep counting
    a buffer that gloo's thread frees, unseen, last."""
    if like.device.type == "cpu":
        return torch.from_numpy(np.zeros(numel * like.element_size(), dtype=np.uint8)).view(like.dtype)
    return like.new_zeros(numel)


def check_flat(name: str, t: torch.Tensor) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if not t.is_contiguous():
        raise ValueError(f"{name}: must be a contiguous (flat) tensor")


def check_avg(name: str, t: torch.Tensor) -> None:
    check_flat(name, t)
    if not t.is_floating_point():
        raise ValueError(f"{name}: averaging needs a floating-point tensor, got {t.dtype}")


def check_sizes(big_name: str, big: torch.Tensor, small_name: str, small: torch.Tensor, world: int) -> None:
    if big.numel() != small.numel() * world:
        raise ValueError(
            f"{big_name}: numel {big.numel()} must equal {small_name}.numel() {small.numel()}"
            f" * world_size {world}"
        )
    if big.dtype != small.dtype:
        raise ValueError(f"{small_name}: dtype {small.dtype} differs from {big_name} dtype {big.dtype}")


class Communicator:
    """Collectives over a process group, paced by a link, recorded for accounting."""

    def __init__(self, group=None, link: Link | None = None, carrier: str = "eager", hold_core: bool = False):
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("Communicator: torch.distributed is not initialised (init_process_group first)")
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.link = link if link is not None else IdealLink()
        self.backend = str(dist.get_backend(group))
        self._lock = threading.Lock()
        self._records: list[CollectiveRecord] = []
        self._pending = 0
        if carrier not in CARRIERS:
            raise ValueError(f"carrier: unknown {carrier!r} (expected one of {', '.join(CARRIERS)})")
        self.carrier = carrier
        self.hold_core = hold_core
        self._deferred = DeferredCarrier(self._start_all_reduce)
        self._live: set[Handle] = set()  # handles not yet completed (shifted by resume())
        self._paused_at: float | None = None
        # CUDA launches on a paced link: the link reserved from when the device reaches each one
        self._device_order = DeviceOrder(self.link, self.world_size)

    # -- bookkeeping -------------------------------------------------------
    def _launch(self, kind: str, tag: str, nbytes: int, t: torch.Tensor) -> CollectiveRecord:
        record = make_record(kind, tag, nbytes, self.world_size, self.link, self._device_order.marker(t))
        with self._lock:
            self._records.append(record)
            self._pending += 1
        self._device_order.add(record)
        return record

    def _completed(self, handle: Handle) -> None:
        with self._lock:
            self._pending -= 1
            self._live.discard(handle)

    def _track(self, handle: Handle) -> Handle:
        with self._lock:
            self._live.add(handle)
        return handle

    def pause(self) -> None:
        """Stop the link's clock between iterations (a run trained in turns with others in one
        process group: dreamddp.run.train.Run.steps): what is on the modelled wire makes no
        progress until resume()."""
        self._device_order.reserve_through()  # between iterations the device has passed every mark
        self._paused_at = time.perf_counter()

    def resume(self) -> None:
        """Restart the clock: every collective still in flight, and the link's queue, are
        shifted by the pause, so another run's compute never hides this run's transfers."""
        if self._paused_at is None:
            return
        dt, self._paused_at = time.perf_counter() - self._paused_at, None
        self.link.shift(dt)
        with self._lock:
            for h in self._live:
                h.record.start += dt
                h.record.deadline += dt

    def _issue(self, record: CollectiveRecord, start_op: Callable[[], object], post, t: torch.Tensor) -> Handle:
        reserve = None if record.ready is None else functools.partial(self._device_order.reserve_through, record)
        if self.carrier in QUEUED:  # held until a wait (step: or the iteration's end)
            handle = Handle(record, None, None, self._completed, _device_sync(t), self._deferred.start, self.hold_core,
                            reserve)
            self._deferred.add(handle, record.kind, t, start_op, post)
            return self._track(handle)
        # A launch that torch rejects must not linger as pending or accounted.
        try:
            work = start_op()
        except BaseException:
            with self._lock:
                self._records.remove(record)
                self._pending -= 1
            self._device_order.discard(record)
            raise
        return self._track(Handle(record, work, post, self._completed, _device_sync(t), hold_core=self.hold_core,
                                  reserve=reserve))

    def _start_all_reduce(self, view: torch.Tensor) -> tuple[object, Callable[[], None] | None]:
        """The deferred carrier's merged all-reduce of ``view`` (AVG): (work, post-op)."""
        native = self._native_avg(view)
        work = dist.all_reduce(view, op=dist.ReduceOp.AVG if native else dist.ReduceOp.SUM,
                               group=self.group, async_op=True)
        return work, self._div_post(view, native)

    def end_iteration(self) -> None:
        """The iteration is over: the step carrier starts what is still queued (the late
        averages of a delayed merge), so it travels while the next iteration computes."""
        if self.carrier == "step":
            self._deferred.start()

    def drain(self) -> list[CollectiveRecord]:
        self._device_order.reserve_through()  # the records' deadlines are read from here on
        with self._lock:
            records, self._records = self._records, []
        return records

    def pending(self) -> int:
        with self._lock:
            return self._pending

    def _native_avg(self, t: torch.Tensor) -> bool:
        return t.is_cuda and "nccl" in self.backend

    def _via_host(self, t: torch.Tensor) -> bool:
        """gloo moves CUDA tensors for all-reduce and broadcast only (several workers sharing
        one GPU run over gloo: NCCL refuses two ranks on one device)."""
        return t.is_cuda and "nccl" not in self.backend

    def _host_staged(self, ops, out: torch.Tensor, inp: torch.Tensor) -> tuple[Callable, Callable]:
        """(start, post) of the collective ``ops(out, inp)`` (its own (start, post)) run on
        host copies: the input is copied to the host when the collective starts, the result
        back to ``out`` when it completes (after the collective's own post step)."""
        host: dict = {}

        def start():
            host["in"], host["out"] = inp.cpu(), torch.empty(out.shape, dtype=out.dtype)
            begin, host["post"] = ops(host["out"], host["in"])
            return begin()

        def post():
            if host["post"] is not None:
                host["post"]()
            out.copy_(host.pop("out"))
            host.clear()

        return start, post

    def _by_all_to_all(self, t: torch.Tensor) -> bool:
        """gloo serves this (host) tensor: its reduce-scatter (and on 2 ranks its all-gather)
        goes as an exchange of all-to-alls (comm/exchange.py)."""
        return not t.is_cuda and "gloo" in self.backend

    def _reduce_scatter_ops(self, out: torch.Tensor, flat: torch.Tensor,
                            alloc=None) -> tuple[Callable, Callable | None]:
        """(start, post) of the AVG reduce-scatter of ``flat`` into ``out``, no host staging;
        ``alloc(like, numel)`` makes the all-to-all's receive buffer (default: torch.empty)."""
        world = self.world_size
        if not self._by_all_to_all(flat):
            native = self._native_avg(flat)
            op = dist.ReduceOp.AVG if native else dist.ReduceOp.SUM
            return (lambda: _reduce_scatter(out, flat, op=op, group=self.group, async_op=True),
                    self._div_post(out, native))
        received: dict[str, torch.Tensor] = {}
        n = out.numel()

        def start():  # row r of ``received``: rank r's chunk number self.rank (row self.rank unused)
            received["in"] = (alloc or empty_like_flat)(flat, flat.numel())
            return exchange(flat.view(-1), received["in"], n, self.rank, self.world_size, self.group, self.link.paced)

        def post():  # the sum in rank order, as comm/fake.py's; then the mean
            rows = received.pop("in").view(world, n)
            mine = flat.view(world, n)[self.rank]
            o = out.view(-1)
            o.copy_(mine if self.rank == 0 else rows[0])
            for r in range(1, world):
                o.add_(mine if r == self.rank else rows[r])
            o.div_(world)

        return start, post

    def _all_gather_ops(self, out: torch.Tensor, shard: torch.Tensor, alloc=None) -> tuple[Callable, None]:
        """(start, post) of the all-gather of ``shard`` into ``out``, no host staging (``alloc``:
        unused, as ``_reduce_scatter_ops``'s signature).  On gloo an exchange on 2 ranks only:
        gloo's ring all-gather sends each neighbour its shard in one message, which on 2 ranks
        goes both ways on one connection, at half the rate under tc (7.75 MB at 56.8 Mbit/s: 1.60x
        the ring formula, the exchange 1.05x); on 4 its messages go one way round the ring
        (1.10-1.22x, the exchange in 64 KiB pieces 1.16x)."""
        if not self._by_all_to_all(shard) or self.world_size > 2:
            return lambda: _all_gather(out, shard, group=self.group, async_op=True), None
        n = shard.numel()

        def start():  # this rank's shard to every rank: an exchange whose every chunk is the shard
            o = out.view(-1)
            o[self.rank * n: (self.rank + 1) * n].copy_(shard.view(-1))
            return exchange(Repeated(shard.view(-1)), o, n, self.rank, self.world_size, self.group, self.link.paced)

        return start, None

    def _div_post(self, t: torch.Tensor, native: bool) -> Callable[[], None] | None:
        if native:
            return None
        world = self.world_size
        return lambda: t.div_(world)

    # -- accounted, paced collectives --------------------------------------
    def all_reduce_avg(self, flat: torch.Tensor, tag: str = "") -> Handle:
        check_avg("flat", flat)
        record = self._launch("all_reduce", tag, flat.numel() * flat.element_size(), flat)
        native = self._native_avg(flat)
        op = dist.ReduceOp.AVG if native else dist.ReduceOp.SUM
        return self._issue(
            record,
            lambda: dist.all_reduce(flat, op=op, group=self.group, async_op=True),
            self._div_post(flat, native),
            flat,
        )

    def reduce_scatter_avg(self, flat: torch.Tensor, out: torch.Tensor, tag: str = "") -> Handle:
        check_avg("flat", flat)
        check_flat("out", out)
        check_sizes("flat", flat, "out", out, self.world_size)
        record = self._launch("reduce_scatter", tag, flat.numel() * flat.element_size(), flat)
        if self._via_host(flat):
            return self._issue(record, *self._host_staged(self._reduce_scatter_ops, out, flat), out)
        return self._issue(record, *self._reduce_scatter_ops(out, flat), out)

    def all_gather(self, out: torch.Tensor, shard: torch.Tensor, tag: str = "") -> Handle:
        check_flat("out", out)
        check_flat("shard", shard)
        check_sizes("out", out, "shard", shard, self.world_size)
        record = self._launch("all_gather", tag, out.numel() * out.element_size(), shard)
        if self._via_host(shard):
            return self._issue(record, *self._host_staged(self._all_gather_ops, out, shard), out)
        return self._issue(record, *self._all_gather_ops(out, shard), out)

    # -- blocking control traffic: unpaced, unaccounted ---------------------
    def probe_latency(self, like: torch.Tensor, repeats: int = 30, warmup: int = 5, numel: int = 1,
                      kind: str = "all_reduce") -> float:
        """Median seconds of one collective on the real backend over ``numel`` elements (AVG, as
        the algorithms launch it; one: its fixed cost): an all-reduce, a reduce-scatter of them
        or an all-gather into them (``kind``), unpaced and unaccounted, after a barrier.  Where
        the algorithms' reduce-scatters and all-gathers go through host copies (gloo with CUDA
        tensors), theirs are probed on the host."""
        world = self.world_size
        if kind != "all_reduce":
            numel = -(-numel // world) * world  # a multiple of the world, as the algorithms pad it
            if self._via_host(like):
                like = torch.empty(0, dtype=like.dtype)
        x = _scratch(like, numel)
        shard = None if kind == "all_reduce" else _scratch(like, numel // world)
        if kind == "all_reduce":
            launch, post = lambda: dist.all_reduce(x, group=self.group, async_op=True), self._div_post(x, False)
        else:  # the algorithms' own path (all-to-all on gloo), on a host tensor where theirs is staged
            launch, post = (self._reduce_scatter_ops(shard, x, _scratch) if kind == "reduce_scatter"
                            else self._all_gather_ops(x, shard, _scratch))
        unpaced = IdealLink()
        dist.barrier(group=self.group)
        times = []
        for i in range(warmup + repeats):
            t0 = time.perf_counter()
            record = make_record(kind, "probe", x.numel() * x.element_size(), world, unpaced)
            Handle(record, launch(), post, None, _device_sync(x)).wait()
            if i >= warmup:
                times.append(time.perf_counter() - t0)
        times.sort()
        return times[len(times) // 2]

    def broadcast(self, flat: torch.Tensor, src: int = 0) -> None:
        """``src`` is a rank within this communicator's group."""
        if not 0 <= src < self.world_size:
            raise ValueError(f"src: must be in [0, {self.world_size}), got {src}")
        dist.broadcast(flat, group=self.group, group_src=src)

    def all_reduce_max(self, values: torch.Tensor) -> None:
        dist.all_reduce(values, op=dist.ReduceOp.MAX, group=self.group)

    def all_reduce_mean(self, values: torch.Tensor) -> None:
        dist.all_reduce(values, op=dist.ReduceOp.SUM, group=self.group)
        values.div_(self.world_size)
