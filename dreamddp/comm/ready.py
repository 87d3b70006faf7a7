"""When a collective's bytes exist: the moment a paced link may start carrying them.

On CPU that is the launch: the hook that launches a unit's all-reduce runs
after the gradient has been computed.  On CUDA the host only queues kernels,
and runs ahead of the device: a gradient hook fires when backward has queued
the unit's kernels.  Measured on an H200 (GPT-2 124M, two workers sharing it;
results/gpu/host_lead.md), the host launched DreamDDP's all-reduces a median
13 ms before the device had their gradients (ASC-WFBP's last buckets up to
47 ms: the lead grows through backward); a link reserved from the launch put
the modelled transfer on the wire that much early, and the iteration's last deadline came 13 ms (DreamDDP, 10% of its
iteration) to 38 ms (the general scheduler's plan, 33%) too soon.

``DeviceReady`` records a CUDA event at the launch, on the current stream
(the one backward's hooks run their unit's kernels on), and reads its host time once the event has completed, through the
device's latest synchronised stamp (dreamddp.clock.anchor_for): no
synchronisation is added, the device never waits for the host.
"""

from __future__ import annotations

import collections
import threading

import torch

from dreamddp.clock import Anchor, anchor_for

Mark = tuple[Anchor, torch.cuda.Event]


class DeviceReady:
    """Marks launches on one CUDA device; a mark turns into a host time once its event is done."""

    def __init__(self, device: torch.device):
        self.device = device

    def mark(self) -> Mark:
        anchor = anchor_for(self.device)  # recorded before this event on the device's timeline
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self.device))
        return anchor, event

    @staticmethod
    def done(mark: Mark) -> bool:
        return mark[1].query()

    @staticmethod
    def host_time(mark: Mark) -> float:
        """Seconds (``perf_counter`` scale) when the device reached the mark; waits for it."""
        anchor, event = mark
        event.synchronize()
        return anchor.host + anchor.event.elapsed_time(event) / 1e3


def device_ready(t: torch.Tensor, cache: dict) -> DeviceReady | None:
    """The marker of ``t``'s device, or None where the launch is the moment (CPU)."""
    if not t.is_cuda:
        return None
    if t.device not in cache:
        cache[t.device] = DeviceReady(t.device)
    return cache[t.device]


class DeviceOrder:
    """The launches on a paced link whose device had not reached them yet (CUDA), in launch
    order: the link's FIFO reserves each one, in that order, from when its device got there."""

    def __init__(self, link, world: int):
        self.link, self.world = link, world
        self._queue: collections.deque = collections.deque()  # records not reserved yet
        self._lock = threading.Lock()
        self._reserving = threading.Lock()  # one resolver at a time, so the FIFO keeps launch order
        self._markers: dict = {}  # device -> DeviceReady

    def marker(self, t: torch.Tensor) -> DeviceReady | None:
        """The marker of a launch on ``t``'s device, or None where the link may be reserved at
        once (CPU; an unpaced link, which reserves nothing)."""
        return device_ready(t, self._markers) if self.link.paced else None

    def add(self, record) -> None:
        if record.ready is not None:
            with self._lock:
                self._queue.append(record)

    def discard(self, record) -> None:
        """A launch that never started (torch refused it)."""
        with self._lock:
            if record in self._queue:
                self._queue.remove(record)

    def reserve_through(self, record=None) -> None:
        """Reserve the link for the queued launches up to ``record`` (None: all of them), in
        launch order, each from when its device reached it (waits for the device that far)."""
        with self._reserving:
            while record is None or record.ready is not None:
                with self._lock:
                    if not self._queue:
                        return
                    head = self._queue.popleft()
                marker, mark = head.ready
                at = max(head.launch, marker.host_time(mark))
                head.start, head.deadline = self.link.reserve(head.kind, head.nbytes, self.world, at)
                head.ready = None
