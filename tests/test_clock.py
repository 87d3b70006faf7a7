"""dreamddp.clock on the CPU: synchronised stamps are the host clock, marks are times since the start.

(On CUDA, tests/test_cuda_timing.py holds marks and stamps to CUDA events.)"""

from __future__ import annotations

import time

import torch

from dreamddp.clock import Stamps, clock_for


def test_cpu_stamps_are_the_host_clock():
    assert clock_for(torch.device("cpu")) is time.perf_counter


def test_marks_are_seconds_since_the_start_and_unmarked_points_read_zero():
    stamps = Stamps(3, torch.device("cpu"))
    t0 = time.perf_counter()
    stamps.begin(t0)
    time.sleep(0.02)
    stamps.mark(2)
    time.sleep(0.01)
    stamps.mark(0)
    at = stamps.read()
    assert at[1] == 0.0 and 0.02 <= at[2] < at[0] and at[0] - at[2] >= 0.01
    stamps.begin(time.perf_counter())  # a new pass forgets the old marks
    assert stamps.read() == [0.0, 0.0, 0.0]
