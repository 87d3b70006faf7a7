"""Wall-clock stamps that mean what they say on a GPU too.

On CUDA, kernels run asynchronously: ``time.perf_counter()`` right after a
forward, a backward or a collective's ``wait()`` records when the host queued
the work, not when the device finished it.  ``clock_for(device)`` returns the
stamp function every timing site uses: the plain host clock on CPU, and on
CUDA a device synchronisation followed by the host clock, so each stamp is
taken after everything queued before it has run.  Synchronising stalls the
device's queue, so points inside a pass (per-unit gradient readiness in the
engine's sampled iterations, per-unit forward in the profiler) are ``Stamps``:
CUDA events read once the pass's end has been stamped.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple


class Anchor(NamedTuple):
    """A point both clocks know: the host time of a device synchronisation, and an event
    recorded right after it (the device idle, it completes at once).  An event recorded later
    on that device reads as ``host + event.elapsed_time(later) / 1e3`` on the host clock."""

    host: float
    event: object  # torch.cuda.Event


_anchors: dict[int, Anchor] = {}  # device index -> its latest synchronised stamp


def clock_for(device) -> Callable[[], float]:
    """Seconds (``perf_counter`` scale) after the work queued on ``device`` has finished."""
    if getattr(device, "type", str(device)) != "cuda":
        return time.perf_counter
    import torch

    def synced() -> float:
        torch.cuda.synchronize(device)
        now = time.perf_counter()
        _remember(device, now)
        return now

    return synced


def _index(device) -> int:
    import torch

    index = torch.device(device).index
    return torch.cuda.current_device() if index is None else index


def _remember(device, now: float) -> None:
    import torch

    event = torch.cuda.Event(enable_timing=True)
    event.record(torch.cuda.current_stream(device))
    _anchors[_index(device)] = Anchor(now, event)


def anchor_for(device) -> Anchor:
    """The latest synchronised stamp of a CUDA ``device`` (every ``clock_for`` stamp makes one;
    made here, synchronising once, where none has been)."""
    anchor = _anchors.get(_index(device))
    if anchor is None:
        clock_for(device)()
        anchor = _anchors[_index(device)]
    return anchor


class Stamps:
    """Times of ``n`` marked points of one pass, in seconds since its start.

    On CPU a mark reads the host clock.  On CUDA a mark records an event on the
    current stream and never stops the device: ``read`` (after a synchronising
    stamp at the pass's end) turns the events into times.  Synchronising at every
    unit instead stretched GPT-2 124M's backward pass by half on an H200 (75 units:
    per-unit sum 26.5 ms against 17.3 ms by events; results/gpu/README.md).
    """

    def __init__(self, n: int, device):
        self.n = n
        self.cuda = getattr(device, "type", str(device)) == "cuda"
        self._marked = [False] * n
        self._t0 = 0.0
        if self.cuda:
            import torch

            self._start = torch.cuda.Event(enable_timing=True)
            self._events = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        else:
            self._times = [0.0] * n

    def begin(self, t0: float) -> None:
        """The pass starts at ``t0`` (a ``clock_for`` stamp: on CUDA the device is idle then)."""
        self._t0 = t0
        self._marked = [False] * self.n
        if self.cuda:
            self._start.record()

    def mark(self, i: int) -> None:
        self._marked[i] = True
        if self.cuda:
            self._events[i].record()
        else:
            self._times[i] = time.perf_counter()

    def marked(self) -> list[bool]:
        """Which points this pass marked (a CUDA mark right after the start can read 0.0 s)."""
        return list(self._marked)

    def read(self) -> list[float]:
        """Seconds since the start of each mark (0.0 where none was made); on CUDA call it after
        a ``clock_for`` stamp, which has waited for every event."""
        if self.cuda:
            return [self._start.elapsed_time(e) / 1e3 if m else 0.0 for e, m in zip(self._events, self._marked)]
        return [t - self._t0 if m else 0.0 for t, m in zip(self._times, self._marked)]
