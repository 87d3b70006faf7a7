"""A paced link reserves the wire from when the device reached a launch, not from the host's launch.

On CUDA the host runs ahead of the device (dreamddp/comm/ready.py); here a fake
device that reaches every launch ``LAG`` seconds after the host queued it
stands in for the CUDA events, on real gloo workers and the emulated link: each
collective's start is exactly max(device-ready, the link's previous deadline),
in launch order, and nothing is reserved before it must be.
"""

from __future__ import annotations

import math
import time

import torch
import torch.distributed as dist

from dist_util import run_workers
from dreamddp.comm import ready
from dreamddp.comm.communicator import Communicator
from dreamddp.comm.links.emulated import EmulatedLink

LAG = 0.05


class LateDevice:
    """Reaches every launch LAG seconds after the host queued it; a mark is that time."""

    def __init__(self):
        self.asked: list[float] = []

    def mark(self) -> float:
        return time.perf_counter() + LAG

    @staticmethod
    def done(mark: float) -> bool:
        return time.perf_counter() >= mark

    def host_time(self, mark: float) -> float:
        self.asked.append(mark)
        return mark


def _late_comm(carrier: str) -> tuple[Communicator, LateDevice]:
    device = LateDevice()
    ready.device_ready = lambda t, cache: device  # this worker process only
    comm = Communicator(link=EmulatedLink(gbps=0.1, alpha_s=0.0), carrier=carrier)
    dist.barrier()
    return comm, device


def _fifo_from_device_ready(rank, world, carrier):
    comm, device = _late_comm(carrier)
    big, small = torch.ones(250_000), torch.ones(1000)  # 1 MB: 80 ms on the modelled link, 2 workers
    h1 = comm.all_reduce_avg(big, tag="big")
    h2 = comm.all_reduce_avg(small, tag="small")
    unreserved = [math.isnan(h.record.deadline) for h in (h1, h2)]
    not_yet = h1.done()  # the device has not reached the launch: nothing reserved
    blocked1 = h1.wait()
    after_first = math.isnan(h2.record.deadline)  # reserved in order, only as far as asked
    h2.wait()
    seconds = comm.link.model().seconds
    r1, r2 = h1.record, h2.record
    return {"unreserved": unreserved, "not_yet": not_yet, "after_first": after_first,
            "asked": device.asked, "blocked1": blocked1,
            "starts": (r1.start, r2.start), "deadlines": (r1.deadline, r2.deadline),
            "launches": (r1.launch, r2.launch),
            "seconds": (seconds("all_reduce", r1.nbytes, world), seconds("all_reduce", r2.nbytes, world)),
            "mean": big[0].item()}


def test_each_collective_starts_when_the_device_reached_it_in_launch_order():
    for carrier in ("eager", "deferred"):
        for r in run_workers(_fifo_from_device_ready, 2, carrier):
            assert r["unreserved"] == [True, True] and r["not_yet"] is False and r["after_first"] is True
            ready1, ready2 = r["asked"]
            assert ready1 - r["launches"][0] >= LAG and ready2 - r["launches"][1] >= LAG
            assert r["starts"][0] == ready1  # the link was idle: the device's time, not the launch
            assert r["deadlines"][0] == ready1 + r["seconds"][0]
            assert r["starts"][1] == max(ready2, r["deadlines"][0])  # FIFO behind the first
            assert r["deadlines"][1] == r["starts"][1] + r["seconds"][1]
            assert r["blocked1"] >= 0.9 * (LAG + r["seconds"][0])
            assert r["mean"] == 1.0


def _drained_and_paused(rank, world):
    comm, device = _late_comm("eager")
    hs = [comm.all_reduce_avg(torch.ones(1000), tag=str(i)) for i in range(3)]
    records = comm.drain()  # an iteration's accounting reads every deadline
    drained = [not math.isnan(r.deadline) for r in records]
    ordered = all(a.deadline <= b.start for a, b in zip(records, records[1:]))
    for h in hs:
        h.wait()
    late = comm.all_reduce_avg(torch.ones(1000), tag="late")
    comm.pause()  # between iterations: the device has passed every mark, and the pause must not count
    paused = not math.isnan(late.record.deadline)
    comm.resume()
    late.wait()
    return drained, ordered, paused, len(device.asked)


def test_drain_and_pause_reserve_what_is_left():
    for drained, ordered, paused, asked in run_workers(_drained_and_paused, 2):
        assert drained == [True, True, True] and ordered and paused and asked == 4
