"""Peak live CPU tensor memory of one benchmark segment, from torch's profiler.

The profiler sees an allocation or a free only on a thread it profiles, so a tensor gloo's worker
thread frees (a gloo reduce-scatter's flattened input) stays live in a sum of its events (+3 to
+37 MiB once).  c10's CPU allocator can keep a total over every thread
(``FLAGS_caffe2_report_cpu_memory_usage``, exported but not bound in Python), which each
allocation event then carries (``total_allocated``).
"""

from __future__ import annotations

import ctypes
import glob
import os

import torch

_FLAG = "FLAGS_caffe2_report_cpu_memory_usage"


def count_every_thread() -> bool:
    """Make c10's CPU allocator count every thread's allocations and frees from now on; False where
    this torch does not export the flag."""
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
    """Live CPU tensor bytes when the range ``mark`` (the training loop) began and at their peak until
    it ended, relative to the profiler's start (``every_thread``: count_every_thread was on before)."""
    events = list(_walk(prof.profiler.kineto_results.experimental_event_tree()))
    loop = next(e for e in events if e.name == mark)
    allocations = sorted((e.start_time_ns, e.extra_fields) for e in events
                         if type(e.extra_fields).__name__ == "_ExtraFields_Allocation"
                         and e.extra_fields.device.type == "cpu")
    base, live, before, peak = None, 0, 0, 0
    for t, a in allocations:
        if t > loop.end_time_ns:
            break
        if every_thread:
            if base is None:  # the allocator's total just before the profiler's first event
                base = a.total_allocated - a.alloc_size
            live = a.total_allocated - base
        else:
            live += a.alloc_size
        if t < loop.start_time_ns:
            before = live
        else:
            peak = max(peak, live)
    how = ("c10's CPU allocator total over every thread" if every_thread else
           "the sum of the profiler's allocation events (frees on other threads unseen)")
    return {"loop_start_bytes": before, "peak_bytes": max(peak, before),
            "note": f"live torch tensor bytes of this segment (built under the profiler) during its "
                    f"training loop: {how}"}
