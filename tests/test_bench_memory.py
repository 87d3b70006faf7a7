"""make bench's CPU memory measurement (dreamddp/bench/memory.py) against tensors of known size.

Each case runs in its own interpreter: the allocator flag it sets stays on for the
process's life.
"""

from __future__ import annotations

import json
import subprocess
import sys
MiB = 1 << 20

# 4 MiB allocated here and freed on another thread before the loop (as gloo's worker
# thread frees a reduce-scatter's flattened input), 1 MiB held into the loop, 2 MiB
# allocated and freed inside it.
_CASE = """
import json, sys, threading, torch
from dreamddp.bench import memory as bench_memory
every = bench_memory.count_every_thread() if {every} else False
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as p:
    box = [torch.ones(1 << 20)]
    t = threading.Thread(target=box.pop)
    t.start(); t.join()
    held = torch.ones(1 << 18)
    with torch.profiler.record_function("loop"):
        x = torch.ones(1 << 19)
        del x
print(json.dumps({{"every": every, **bench_memory.loop_memory(p, "loop", every)}}))
"""


def _measure(every: bool) -> dict:
    code = _CASE.format(every=every)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_tensor_freed_on_another_thread_is_not_counted_live():
    m = _measure(every=True)
    assert m["every"] is True  # this torch exports the flag; the bench relies on it
    assert m["loop_start_bytes"] == 1 * MiB
    assert m["peak_bytes"] == 3 * MiB


def test_without_the_allocator_total_the_profiler_keeps_it_live():
    # Why the flag: the profiler alone never sees the other thread's free.
    m = _measure(every=False)
    assert m["loop_start_bytes"] == 5 * MiB
    assert m["peak_bytes"] == 7 * MiB
