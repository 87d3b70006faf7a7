"""One accounted collective in flight: its record (launch, link reservation, completion) and
the handle its caller waits on (comm/communicator.py launches them)."""

from __future__ import annotations

import math
import os
import threading
import time
from dataclasses import dataclass
from typing import Callable

from dreamddp.comm.cost import ring_factor
from dreamddp.comm.links.base import Link


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
    # (marker, mark) until the link is reserved from the device's ready time (CUDA: comm/ready.py);
    # start and deadline are nan until then
    ready: tuple | None = None


def make_record(kind: str, tag: str, nbytes: int, world: int, link: Link, marker=None) -> CollectiveRecord:
    """Stamp launch time and reserve the link, or with a device ``marker`` mark the launch on
    the device, the link to be reserved from when the device reaches it (comm/ready.py);
    touches no tensor data."""
    now = time.perf_counter()
    ready = None if marker is None else (marker, marker.mark())
    start, deadline = link.reserve(kind, nbytes, world, now) if ready is None else (math.nan, math.nan)
    return CollectiveRecord(
        kind, tag, nbytes, ring_factor(kind, world) * nbytes, now, start, deadline, ready=ready
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
        reserve: Callable[[], None] | None = None,
    ):
        self.record = record
        self._hold_core = hold_core  # wait busy (yielding), not asleep: comm/communicator.py
        self._work = work  # None: nothing real in flight (fake / trivially complete)
        # CUDA: Work.wait() only orders streams; synchronising makes "blocked" include completion.
        self._device_sync = device_sync
        self._post = post
        self._on_complete = on_complete
        # Deferred carrier: starts the real collectives still pending (this one among them).
        self._issue = issue
        # CUDA on a paced link: reserves the wire from the device's ready time (record.ready)
        self._reserve = reserve
        self._lock = threading.Lock()
        self._finished = False
        self._error: BaseException | None = None  # its real work could not start (deferred carrier)

    def started(self, work, post: Callable[[], None] | None) -> None:
        """The deferred carrier started this collective's real work (and its post-op)."""
        self._work, self._post, self._issue = work, post, None

    def failed(self, error: BaseException) -> None:
        """The deferred carrier could not start this collective (nothing if it did): its
        wait raises ``error`` rather than return a buffer nobody averaged."""
        if self._issue is not None:
            self._error, self._issue = error, None

    def done(self) -> bool:
        work = self._work  # local: a concurrent wait() may clear the attribute
        if self._finished or self._error is not None:  # an error: wait() says which
            return True
        if self._issue is not None or (work is not None and not work.is_completed()):
            return False
        ready = self.record.ready
        if ready is not None:
            if not ready[0].done(ready[1]):
                return False
            self._reserve()
        return time.perf_counter() >= self.record.deadline

    def wait(self) -> float:
        t0 = time.perf_counter()
        with self._lock:
            if self._finished:
                return 0.0
            if self._issue is not None:
                self._issue()
            if self._error is not None:
                raise RuntimeError(f"collective {self.record.kind} {self.record.tag!r} never started: "
                                   f"the backend refused a collective queued with it ({self._error})") from self._error
            if self._work is not None:
                self._work.wait()  # asleep even when holding: the backend's threads need the core
                if self._device_sync is not None:
                    self._device_sync()
            if self._reserve is not None:  # the device is past the mark by now: no wait here
                self._reserve()
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
