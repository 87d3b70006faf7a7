"""Asynchronous, paced, accounted collectives over torch.distributed.

Every accounted collective is launched asynchronously, reserves wire time on
the worker's link at launch, and completes in ``Handle.wait()`` only once both
the real collective has finished and the link's deadline has passed.  Pacing
sleeps in the caller's thread (never spins, never blocks gloo's threads), so
compute between launch and wait genuinely overlaps the modelled transfer.

AVG: NCCL has ``ReduceOp.AVG`` and uses it.  gloo does not, so the
collective runs as SUM and ``wait()`` divides by the world size in the
caller's thread; every rank holds bitwise-identical sums, so the means are
bitwise identical too.  Until ``wait()`` returns the buffer holds sums (or
anything), so it must not be read or written between launch and wait.

gloo in torch 2.13 implements reduce-scatter and all-gather into flat tensors
natively (checked in tests/test_comm_gloo.py), so no all-reduce fallback is
needed; the link charges each with its own ring formula.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable

import torch
import torch.distributed as dist

from dreamddp.comm.cost import ring_factor
from dreamddp.comm.links.base import Link
from dreamddp.comm.links.ideal import IdealLink

# torch 2.13 renamed the flat-tensor variants; the old names still work but warn.
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


@dataclass
class CollectiveRecord:
    kind: str
    tag: str
    nbytes: int  # payload bytes of the flat tensor
    wire_bytes: float  # bytes this worker sends on a ring: ring_factor * nbytes
    launch: float
    start: float
    deadline: float
    complete: float | None = None
    blocked: float = 0.0  # seconds the caller spent inside wait()


def make_record(kind: str, tag: str, nbytes: int, world: int, link: Link) -> CollectiveRecord:
    """Stamp launch time and reserve the link; touches no tensor data."""
    now = time.perf_counter()
    start, deadline = link.reserve(kind, nbytes, world, now)
    return CollectiveRecord(
        kind, tag, nbytes, ring_factor(kind, world) * nbytes, now, start, deadline
    )


class Handle:
    """One in-flight collective: real work + link deadline + a post-op."""

    def __init__(
        self,
        record: CollectiveRecord,
        work=None,
        post: Callable[[], None] | None = None,
        on_complete: Callable[["Handle"], None] | None = None,
        device_sync: Callable[[], None] | None = None,
    ):
        self.record = record
        self._work = work  # None: nothing real in flight (fake / trivially complete)
        # CUDA: Work.wait() only orders streams; synchronising makes "blocked" include completion.
        self._device_sync = device_sync
        self._post = post
        self._on_complete = on_complete
        self._lock = threading.Lock()
        self._finished = False

    def done(self) -> bool:
        work = self._work  # local: a concurrent wait() may clear the attribute
        if self._finished:
            return True
        if work is not None and not work.is_completed():
            return False
        return time.perf_counter() >= self.record.deadline

    def wait(self) -> float:
        t0 = time.perf_counter()
        with self._lock:
            if self._finished:
                return 0.0
            if self._work is not None:
                self._work.wait()
                if self._device_sync is not None:
                    self._device_sync()
            remaining = self.record.deadline - time.perf_counter()
            if remaining > 0:
                time.sleep(remaining)
            if self._post is not None:
                self._post()
            end = time.perf_counter()
            self.record.complete = end
            self.record.blocked += end - t0
            self._finished = True
            self._work = self._post = None  # drop tensor references early
        if self._on_complete is not None:
            self._on_complete(self)
        return end - t0


def _device_sync(t: torch.Tensor) -> Callable[[], None] | None:
    return (lambda: torch.cuda.synchronize(t.device)) if t.is_cuda else None


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

    def __init__(self, group=None, link: Link | None = None):
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

    # -- bookkeeping -------------------------------------------------------
    def _launch(self, kind: str, tag: str, nbytes: int) -> CollectiveRecord:
        record = make_record(kind, tag, nbytes, self.world_size, self.link)
        with self._lock:
            self._records.append(record)
            self._pending += 1
        return record

    def _completed(self, handle: Handle) -> None:
        with self._lock:
            self._pending -= 1

    def _issue(self, record: CollectiveRecord, start_op: Callable[[], object], post, t: torch.Tensor) -> Handle:
        # A launch that torch rejects must not linger as pending or accounted.
        try:
            work = start_op()
        except BaseException:
            with self._lock:
                self._records.remove(record)
                self._pending -= 1
            raise
        return Handle(record, work, post, self._completed, _device_sync(t))

    def drain(self) -> list[CollectiveRecord]:
        with self._lock:
            records, self._records = self._records, []
        return records

    def pending(self) -> int:
        with self._lock:
            return self._pending

    def _native_avg(self, t: torch.Tensor) -> bool:
        return t.is_cuda and "nccl" in self.backend

    def _div_post(self, t: torch.Tensor, native: bool) -> Callable[[], None] | None:
        if native:
            return None
        world = self.world_size
        return lambda: t.div_(world)

    # -- accounted, paced collectives --------------------------------------
    def all_reduce_avg(self, flat: torch.Tensor, tag: str = "") -> Handle:
        check_avg("flat", flat)
        record = self._launch("all_reduce", tag, flat.numel() * flat.element_size())
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
        record = self._launch("reduce_scatter", tag, flat.numel() * flat.element_size())
        native = self._native_avg(flat)
        op = dist.ReduceOp.AVG if native else dist.ReduceOp.SUM
        return self._issue(
            record,
            lambda: _reduce_scatter(out, flat, op=op, group=self.group, async_op=True),
            self._div_post(out, native),
            out,
        )

    def all_gather(self, out: torch.Tensor, shard: torch.Tensor, tag: str = "") -> Handle:
        check_flat("out", out)
        check_flat("shard", shard)
        check_sizes("out", out, "shard", shard, self.world_size)
        record = self._launch("all_gather", tag, out.numel() * out.element_size())
        return self._issue(
            record, lambda: _all_gather(out, shard, group=self.group, async_op=True), None, out
        )

    # -- blocking control traffic: unpaced, unaccounted ---------------------
    def probe_latency(self, like: torch.Tensor, repeats: int = 30, warmup: int = 5) -> float:
        """Median seconds of one collective on the real backend: a one-element all-reduce
        (AVG, as the algorithms launch it), unpaced and unaccounted, after a barrier."""
        x = like.new_zeros(1)
        unpaced = IdealLink()
        dist.barrier(group=self.group)
        times = []
        for i in range(warmup + repeats):
            t0 = time.perf_counter()
            record = make_record("all_reduce", "probe", x.element_size(), self.world_size, unpaced)
            work = dist.all_reduce(x, group=self.group, async_op=True)
            Handle(record, work, self._div_post(x, False), None, _device_sync(x)).wait()
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
