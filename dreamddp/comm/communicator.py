"""Asynchronous, paced, accounted collectives over torch.distributed.

Every accounted collective is launched asynchronously, reserves wire time on
the worker's link at launch, and completes in ``Handle.wait()`` only once both
the real collective has finished and the link's deadline has passed.  Pacing
happens in the caller's thread (asleep, or yielding while it holds its core,
below; never blocking gloo's threads), so compute between launch and wait
genuinely overlaps the modelled transfer.

AVG: NCCL has ``ReduceOp.AVG`` and uses it.  gloo does not, so the
collective runs as SUM and ``wait()`` divides by the world size in the
caller's thread; every rank holds bitwise-identical sums, so the means are
bitwise identical too.  Until ``wait()`` returns the buffer holds sums (or
anything), so it must not be read or written between launch and wait.

gloo in torch 2.13 implements reduce-scatter and all-gather into flat tensors
natively (checked in tests/test_comm_gloo.py), so no all-reduce fallback is
needed; the link charges each with its own ring formula.

Holding the core (``bandwidth.hold_core``).  With more workers than cores, a
worker asleep in ``wait()`` lends its core to the others, whose compute then
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
at launch, as a NIC would.  ``deferred`` starts it at the first ``wait()`` on
any pending collective, merges consecutive pending all-reduces on adjacent
slices of one buffer into one real all-reduce, and packs the small ones that
remain into one more.  Why: on CPU the backend's
threads make little progress while the workers compute (runners/carrier_check.py:
4 workers on 2 cores, none of 10 small all-reduces launched before 100 ms of
compute had completed at its end), so a real collective started during
backward completes long after the link model's deadline, and each one pays the
backend's per-collective cost; deferred, they run as one while the worker is
blocked anyway.  The modelled timing is untouched: every collective still
reserves the link at launch and completes no earlier than its deadline.
A merged all-reduce sums the same numbers, in the order gloo's ring picks for
the longer buffer, so results equal eager launches' up to float rounding, and
are bitwise identical on every rank (tests/test_comm_carrier.py).  Every rank issues the same real collectives in the same order,
because pending collectives are flushed in launch order at program points
(waits) that are the same on every rank.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Callable

import torch
import torch.distributed as dist

from dreamddp.comm.cost import CARRIERS, ring_factor
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
        issue: Callable[[], None] | None = None,
        hold_core: bool = False,
    ):
        self.record = record
        self._hold_core = hold_core  # wait busy (yielding), not asleep: see Communicator
        self._work = work  # None: nothing real in flight (fake / trivially complete)
        # CUDA: Work.wait() only orders streams; synchronising makes "blocked" include completion.
        self._device_sync = device_sync
        self._post = post
        self._on_complete = on_complete
        # Deferred carrier: starts the real collectives still pending (this one among them).
        self._issue = issue
        self._lock = threading.Lock()
        self._finished = False

    def started(self, work, post: Callable[[], None] | None) -> None:
        """The deferred carrier started this collective's real work (and its post-op)."""
        self._work, self._post, self._issue = work, post, None

    def done(self) -> bool:
        work = self._work  # local: a concurrent wait() may clear the attribute
        if self._finished:
            return True
        if self._issue is not None or (work is not None and not work.is_completed()):
            return False
        return time.perf_counter() >= self.record.deadline

    def wait(self) -> float:
        t0 = time.perf_counter()
        with self._lock:
            if self._finished:
                return 0.0
            if self._issue is not None:
                self._issue()
            if self._work is not None:
                self._work.wait()  # asleep even when holding: the backend's threads need the core
                if self._device_sync is not None:
                    self._device_sync()
            if self._hold_core:
                while time.perf_counter() < self.record.deadline:
                    os.sched_yield()
            else:
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


def _once(fn: Callable[[], None] | None) -> Callable[[], None] | None:
    """``fn`` shared by several handles of one merged collective: it runs on the first wait."""
    if fn is None:
        return None
    done = [False]

    def run() -> None:
        if not done[0]:
            done[0] = True
            fn()
    return run


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


@dataclass
class _Pending:
    """A collective whose real work the deferred carrier has not started yet."""

    handle: Handle
    kind: str
    tensor: torch.Tensor  # the buffer the real collective works on (all-reduce: in place)
    start_op: Callable[[], object]
    post: Callable[[], None] | None


def _adjacent(a: torch.Tensor, b: torch.Tensor) -> bool:
    """``b`` starts where ``a`` ends in the same storage (so one flat view spans both)."""
    return (a.dtype == b.dtype and a.device == b.device
            and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
            and a.storage_offset() + a.numel() == b.storage_offset())


# Deferred all-reduces of at most this many bytes travel packed into one buffer (copied in
# and out) instead of each paying a collective's fixed cost.
PACK_BYTES = 256 * 1024


def _memory_ordered(queue: list[_Pending]) -> list[_Pending]:
    """``queue`` with each stretch of consecutive all-reduces sorted by (buffer in order of its
    first launch, offset); a stretch whose slices overlap keeps its launch order.  The same
    on every rank: it depends only on the launch order and the offsets."""
    out: list[_Pending] = []
    stretch: list[_Pending] = []
    for p in [*queue, None]:
        if p is not None and p.kind == "all_reduce":
            stretch.append(p)
            continue
        buffers: dict[int, int] = {}
        for q in stretch:
            buffers.setdefault(q.tensor.untyped_storage().data_ptr(), len(buffers))
        ordered = sorted(stretch, key=lambda q: (buffers[q.tensor.untyped_storage().data_ptr()], q.tensor.storage_offset()))
        overlap = any(a.tensor.untyped_storage().data_ptr() == b.tensor.untyped_storage().data_ptr()
                      and a.tensor.storage_offset() + a.tensor.numel() > b.tensor.storage_offset()
                      for a, b in zip(ordered, ordered[1:]))
        out += stretch if overlap else ordered
        stretch = []
        if p is not None:
            out.append(p)
    return out


def _span(first: torch.Tensor, numel: int) -> torch.Tensor:
    """A flat view of ``numel`` elements of ``first``'s storage, from where ``first`` starts."""
    return first.new_empty(0).set_(first.untyped_storage(), first.storage_offset(), (numel,), (1,))


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
        self._deferred: list[_Pending] = []
        self._live: set[Handle] = set()  # handles not yet completed (shifted by resume())
        self._paused_at: float | None = None

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
            self._live.discard(handle)

    def _track(self, handle: Handle) -> Handle:
        with self._lock:
            self._live.add(handle)
        return handle

    def pause(self) -> None:
        """Stop the link's clock between iterations (runners/bench_worker.py interleaves runs
        in one process group): what is on the modelled wire makes no progress until resume()."""
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
        if self.carrier == "deferred":
            handle = Handle(record, None, None, self._completed, _device_sync(t), self._start_deferred, self.hold_core)
            self._deferred.append(_Pending(handle, record.kind, t, start_op, post))
            return self._track(handle)
        # A launch that torch rejects must not linger as pending or accounted.
        try:
            work = start_op()
        except BaseException:
            with self._lock:
                self._records.remove(record)
                self._pending -= 1
            raise
        return self._track(Handle(record, work, post, self._completed, _device_sync(t), hold_core=self.hold_core))

    def _start_deferred(self) -> None:
        """Start every pending real collective.  Each stretch of consecutive all-reduces is
        put in memory order (buffers by first launch, then offset: gradient hooks do not
        always fire in the units' index order); those on adjacent slices of one buffer go
        as one all-reduce in place, and the runs of a stretch no bigger than
        ``PACK_BYTES`` go together through one packed buffer (copied in and out: for
        them the collective's fixed cost outweighs the copy).  A sum of a concatenation is
        the concatenation of the sums, up to rounding.  Other kinds go in launch order."""
        queue = _memory_ordered(self._deferred)
        self._deferred = []
        runs: list[list[_Pending]] = []
        for p in queue:
            last = runs[-1][-1] if runs else None
            if last is not None and p.kind == last.kind == "all_reduce" and _adjacent(last.tensor, p.tensor):
                runs[-1].append(p)
            else:
                runs.append([p])
        i = 0
        while i < len(runs):
            if runs[i][0].kind != "all_reduce":
                runs[i][0].handle.started(runs[i][0].start_op(), runs[i][0].post)
                i += 1
                continue
            j = i
            while j < len(runs) and runs[j][0].kind == "all_reduce":
                j += 1
            stretch = [(_span(r[0].tensor, sum(p.tensor.numel() for p in r)), r) for r in runs[i:j]]
            first = stretch[0][0]
            small = [(v, r) for v, r in stretch if v.numel() * v.element_size() <= PACK_BYTES
                     and v.dtype == first.dtype and v.device == first.device]
            if len(small) >= 2:
                self._start_packed(small)
            for view, run in stretch:
                if len(small) < 2 or all(view is not v for v, _ in small):
                    self._start_in_place(view, run)
            i = j

    def _start_in_place(self, view: torch.Tensor, run: list[_Pending]) -> None:
        if len(run) == 1:
            work, post = run[0].start_op(), run[0].post
        else:
            native = self._native_avg(view)
            work = dist.all_reduce(view, op=dist.ReduceOp.AVG if native else dist.ReduceOp.SUM,
                                   group=self.group, async_op=True)
            post = _once(self._div_post(view, native))
        for p in run:
            p.handle.started(work, post)

    def _start_packed(self, small: list[tuple[torch.Tensor, list[_Pending]]]) -> None:
        views = [v for v, _ in small]
        packed = torch.cat(views)
        native = self._native_avg(packed)
        work = dist.all_reduce(packed, op=dist.ReduceOp.AVG if native else dist.ReduceOp.SUM,
                               group=self.group, async_op=True)
        divide = self._div_post(packed, native)

        def unpack() -> None:
            if divide is not None:
                divide()
            offset = 0
            for v in views:
                v.copy_(packed[offset:offset + v.numel()])
                offset += v.numel()
        post = _once(unpack)
        for _, run in small:
            for p in run:
                p.handle.started(work, post)

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

    def all_reduce_mean(self, values: torch.Tensor) -> None:
        dist.all_reduce(values, op=dist.ReduceOp.SUM, group=self.group)
        values.div_(self.world_size)
