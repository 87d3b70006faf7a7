"""The deferred carrier (``bandwidth.carrier=deferred``): real collectives started at the first wait.

On a paced link the real collective only carries the bytes; the link model
says when they arrive.  On CPU, gloo's threads compete with the computing
workers for the cores (runners/carrier_check.py, 4 workers on 2 cores: of 10
small all-reduces launched before 100 ms of compute, anywhere from 0 to 9 had
completed at its end, run to run), so a real collective started during
backward may complete long after the link model's deadline, and each one pays
the backend's per-collective cost.  Measured in `make bench` (small GPT-2, 4
workers, 3 repetitions): DreamDDP 0.130 s per iteration deferred vs 0.148 s
eager, FLSGD 0.130 vs 0.134 s.
Deferred, the collectives a worker launched wait in a queue until it first
waits for one of them, then go together while it is blocked anyway:

- each stretch of consecutive all-reduces is put in memory order (buffers in
  order of first launch, then offset: gradient hooks do not always fire in the
  units' index order);
- all-reduces on adjacent slices of one buffer go as one, in place;
- of the runs left, those of at most ``SMALL_BYTES`` go together through one
  packed buffer, copied in and out, in memory order until it holds
  ``PACK_BYTES`` (for them a collective's fixed cost outweighs the copy; the
  cap keeps the extra memory small: 0.9% of the small ResNet-18's peak);
  the others go alone, in place;
- other kinds (reduce-scatter, all-gather) go alone, in launch order.

A merged all-reduce sums the same numbers, in the order gloo's ring picks for
the longer buffer: results equal eager launches' up to float rounding and are
bitwise identical on every rank (tests/test_comm_carrier.py).  Every rank
starts the same real collectives in the same order: the queue's content and
order depend only on the program, and it is flushed at program points (waits)
that are the same on every rank.  The modelled timing is untouched: each
collective reserved the link at its launch and completes no earlier than its
deadline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

# Runs of deferred all-reduces of at most SMALL_BYTES travel packed into one buffer of at
# most PACK_BYTES (a transient copy: the only memory the carrier adds).
SMALL_BYTES = 64 * 1024
PACK_BYTES = 256 * 1024

Post = Callable[[], None] | None
AllReduce = Callable[[torch.Tensor], tuple[object, Post]]  # view -> (work, post-op), AVG


@dataclass
class Pending:
    """A collective whose real work has not started yet."""

    handle: object  # communicator.Handle: told started(work, post)
    kind: str
    tensor: torch.Tensor  # the buffer the real collective works on (all-reduce: in place)
    start_op: Callable[[], object]  # starts it alone, as the eager carrier would
    post: Post


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def adjacent(a: torch.Tensor, b: torch.Tensor) -> bool:
    """``b`` starts where ``a`` ends in the same storage (so one flat view spans both)."""
    return (a.dtype == b.dtype and a.device == b.device and _storage(a) == _storage(b)
            and a.storage_offset() + a.numel() == b.storage_offset())


def span(first: torch.Tensor, numel: int) -> torch.Tensor:
    """A flat view of ``numel`` elements of ``first``'s storage, from where ``first`` starts."""
    return first.new_empty(0).set_(first.untyped_storage(), first.storage_offset(), (numel,), (1,))


def once(fn: Post) -> Post:
    """``fn`` shared by the handles of one merged collective: it runs on the first wait."""
    if fn is None:
        return None
    done = [False]

    def run() -> None:
        if not done[0]:
            done[0] = True
            fn()
    return run


def memory_ordered(queue: list[Pending]) -> list[Pending]:
    """``queue`` with each stretch of consecutive all-reduces sorted by (buffer in order of its
    first launch, offset); a stretch whose slices overlap keeps its launch order."""
    out: list[Pending] = []
    stretch: list[Pending] = []
    for p in [*queue, None]:
        if p is not None and p.kind == "all_reduce":
            stretch.append(p)
            continue
        buffers: dict[int, int] = {}
        for q in stretch:
            buffers.setdefault(_storage(q.tensor), len(buffers))
        ordered = sorted(stretch, key=lambda q: (buffers[_storage(q.tensor)], q.tensor.storage_offset()))
        overlap = any(_storage(a.tensor) == _storage(b.tensor)
                      and a.tensor.storage_offset() + a.tensor.numel() > b.tensor.storage_offset()
                      for a, b in zip(ordered, ordered[1:]))
        out += stretch if overlap else ordered
        stretch = []
        if p is not None:
            out.append(p)
    return out


def _runs(queue: list[Pending]) -> list[list[Pending]]:
    """Consecutive all-reduces on adjacent slices grouped; everything else alone."""
    runs: list[list[Pending]] = []
    for p in queue:
        last = runs[-1][-1] if runs else None
        if last is not None and p.kind == last.kind == "all_reduce" and adjacent(last.tensor, p.tensor):
            runs[-1].append(p)
        else:
            runs.append([p])
    return runs


class DeferredCarrier:
    """The queue of one communicator's collectives not yet started."""

    def __init__(self, all_reduce: AllReduce):
        self._all_reduce = all_reduce
        self._queue: list[Pending] = []

    def add(self, handle, kind: str, tensor: torch.Tensor, start_op: Callable[[], object], post: Post) -> None:
        self._queue.append(Pending(handle, kind, tensor, start_op, post))

    def start(self) -> None:
        """Start every queued collective (a handle's first wait calls this)."""
        queue, self._queue = memory_ordered(self._queue), []
        runs = _runs(queue)
        i = 0
        while i < len(runs):
            if runs[i][0].kind != "all_reduce":
                p = runs[i][0]
                p.handle.started(p.start_op(), p.post)
                i += 1
                continue
            j = i
            while j < len(runs) and runs[j][0].kind == "all_reduce":
                j += 1
            views = [(span(r[0].tensor, sum(p.tensor.numel() for p in r)), r) for r in runs[i:j]]
            small = self._pack(views)
            if small:
                self._start_packed(small)
            packed = {id(r[0]) for _, r in small}
            for view, run in views:
                if id(run[0]) not in packed:
                    self._start_in_place(view, run)
            i = j

    @staticmethod
    def _pack(views: list[tuple[torch.Tensor, list[Pending]]]) -> list[tuple[torch.Tensor, list[Pending]]]:
        """The runs that travel packed: small ones of the first's dtype and device, in memory
        order, up to PACK_BYTES in all (none unless at least two)."""
        first, small, total = views[0][0], [], 0
        for v, r in views:
            size = v.numel() * v.element_size()
            if size <= SMALL_BYTES and total + size <= PACK_BYTES and v.dtype == first.dtype and v.device == first.device:
                small.append((v, r))
                total += size
        return small if len(small) >= 2 else []

    def _start_in_place(self, view: torch.Tensor, run: list[Pending]) -> None:
        if len(run) == 1:
            work, post = run[0].start_op(), run[0].post
        else:
            work, post = self._all_reduce(view)
            post = once(post)
        for p in run:
            p.handle.started(work, post)

    def _start_packed(self, small: list[tuple[torch.Tensor, list[Pending]]]) -> None:
        views = [v for v, _ in small]
        packed = torch.cat(views)
        work, average = self._all_reduce(packed)

        def unpack() -> None:
            if average is not None:
                average()
            offset = 0
            for v in views:
                v.copy_(packed[offset:offset + v.numel()])
                offset += v.numel()
        post = once(unpack)
        for _, run in small:
            for p in run:
                p.handle.started(work, post)
