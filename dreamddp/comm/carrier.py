"""The deferred carrier (``bandwidth.carrier=deferred``): real collectives started at the first wait.

On a paced link the real collective only carries the bytes; the link model
says when they arrive.  On CPU, gloo's threads compete with the computing
workers for the cores (docs/findings.md; 4 workers on 2 cores: of 10
small all-reduces launched before 100 ms of compute, anywhere from 0 to 9 had
completed at its end, run to run), so a real collective started during
backward may complete long after the link model's deadline, and each one pays
the backend's per-collective cost.  Measured in `make bench` (small GPT-2, 4
workers, 3 repetitions): DreamDDP 0.130 s per iteration deferred vs 0.148 s
eager, FLSGD 0.130 vs 0.134 s.
Deferred, the collectives a worker launched wait in a queue until it first
waits for one of them, then go together while it is blocked anyway, grouped
as comm/carry.py says (adjacent all-reduces merged in place, small ones
packed; the simulator times the same grouping).

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

from dreamddp.comm.carry import Slot, carried

Post = Callable[[], None] | None
AllReduce = Callable[[torch.Tensor], tuple[object, Post]]  # view -> (work, post-op), AVG


@dataclass
class Pending:
    """A collective whose real work has not started yet."""

    handle: object  # comm/handle.py Handle: told started(work, post)
    kind: str
    tensor: torch.Tensor  # the buffer the real collective works on (all-reduce: in place)
    start_op: Callable[[], object]  # starts it alone, as the eager carrier would
    post: Post


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def span(first: torch.Tensor, numel: int) -> torch.Tensor:
    """A flat view of ``numel`` elements of ``first``'s storage, from where ``first`` starts."""
    return first.new_empty(0).set_(first.untyped_storage(), first.storage_offset(), (numel,), (1,))


def _span_of(run: list[Pending]) -> torch.Tensor:
    """One flat view over a run of adjacent slices."""
    return span(run[0].tensor, sum(p.tensor.numel() for p in run))


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


def slot(p: Pending) -> Slot:
    """Where ``p``'s bytes lie, as comm/carry.py groups them."""
    t = p.tensor
    return Slot(p.kind, _storage(t), t.storage_offset() * t.element_size(), t.numel() * t.element_size(),
                (t.dtype, t.device))


class DeferredCarrier:
    """The queue of one communicator's collectives not yet started."""

    def __init__(self, all_reduce: AllReduce):
        self._all_reduce = all_reduce
        self._queue: list[Pending] = []

    def add(self, handle, kind: str, tensor: torch.Tensor, start_op: Callable[[], object], post: Post) -> None:
        self._queue.append(Pending(handle, kind, tensor, start_op, post))

    def start(self) -> None:
        """Start every queued collective (a handle's first wait calls this).

        If the backend refuses one (a peer gone), the ones not started yet fail with
        it: left unstarted, a later wait would find nothing to start and return an
        unaveraged buffer as if averaged."""
        queue, self._queue = self._queue, []
        try:
            for real in carried([slot(p) for p in queue]):
                runs = [[queue[i] for i in run] for run in real.runs]
                if real.packed:
                    self._start_packed([(_span_of(r), r) for r in runs])
                else:
                    self._start_in_place(runs[0])
        except BaseException as error:
            for p in queue:
                p.handle.failed(error)
            raise

    def _start_in_place(self, run: list[Pending]) -> None:
        if len(run) == 1:
            work, post = run[0].start_op(), run[0].post
        else:
            work, post = self._all_reduce(_span_of(run))
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
