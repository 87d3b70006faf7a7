"""Peak live CPU tensor memory of one benchmark segment, from torch's profiler.

The profiler records an allocation or a free only on a thread it profiles, so a
tensor the main thread allocated and gloo's worker thread freed (the flattened
input of a gloo reduce-scatter is one: its work object holds the last
reference) stays live in a sum of the profiler's allocation sizes: make bench's
memory table once showed such leftovers as +3 to +37 MiB at the start of the
training loop, more or less in each run depending on which thread won.

c10's CPU allocator can keep its own total over every thread
(``FLAGS_caffe2_report_cpu_memory_usage``, a c10 command-line flag torch
exports but does not bind in Python); each allocation event the profiler records
then carries that total (``total_allocated``).  :func:`count_every_thread` turns
the flag on through the exported symbol; :func:`loop_memory` reads the totals,
or falls back to summing the events' sizes where the flag could not be set.
"""

from __future__ import annotations

import ctypes
import glob
import os

import torch

_FLAG = "FLAGS_caffe2_report_cpu_memory_usage"


def count_every_thread() -> bool:
    """Make c10's CPU allocator count every thread's allocations and frees from now on
    (tensors allocated before are not counted, nor their frees).  False where this
    torch does not export the flag."""
    for lib in glob.glob(os.path.join(os.path.dirname(torch.__file__), "lib", "libc10.*")):
        try:
            ctypes.c_bool.in_dll(ctypes.CDLL(lib), _FLAG).value = True
            return True
        except (OSError, ValueError):
            continue
    return False


def _walk(events):
    stack = list(events)
    while stack:
        e = stack.pop()
        yield e
        stack.extend(e.children)


def loop_memory(prof, mark: str, every_thread: bool) -> dict:
    """Live CPU tensor bytes of what ran under ``prof``: when the range named ``mark`` (the
    training loop) began, and at their peak until it ended; both relative to what was live
    when the profiler started.  ``every_thread``: :func:`count_every_thread` was in effect
    before the profiler started."""
    events = list(_walk(prof.profiler.kineto_results.experimental_event_tree()))
    loop = next(e for e in events if e.name == mark)
    start, end = loop.start_time_ns, loop.end_time_ns
    allocations = sorted((e.start_time_ns, e.extra_fields) for e in events
                         if type(e.extra_fields).__name__ == "_ExtraFields_Allocation"
                         and e.extra_fields.device.type == "cpu")
    base = None
    live, before, peak = 0, 0, 0
    for t, a in allocations:
        if t > end:
            break
        if every_thread:
            if base is None:  # the allocator's total just before the profiler's first event
                base = a.total_allocated - a.alloc_size
            live = a.total_allocated - base
        else:
            live += a.alloc_size
        if t < start:
            before = live
        else:
            peak = max(peak, live)
    how = ("c10's CPU allocator total over every thread" if every_thread else
           "the sum of the profiler's allocation events (frees on other threads unseen)")
    return {"loop_start_bytes": before, "peak_bytes": max(peak, before),
            "note": f"live torch tensor bytes of this segment (built under the profiler) during its "
                    f"training loop: {how}"}
