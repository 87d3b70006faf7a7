"""Wall-clock stamps that mean what they say on a GPU too.

On CUDA, kernels run asynchronously: ``time.perf_counter()`` right after a
forward, a backward or a collective's ``wait()`` records when the host queued
the work, not when the device finished it.  ``clock_for(device)`` returns the
stamp function every timing site uses: the plain host clock on CPU, and on
CUDA a device synchronisation followed by the host clock, so each stamp is
taken after everything queued before it has run.  Synchronising costs host /
device overlap, so the engine stamps per-unit gradient readiness only in its
sampled iterations.
"""

from __future__ import annotations

import time
from collections.abc import Callable


def clock_for(device) -> Callable[[], float]:
    """Seconds (``perf_counter`` scale) after the work queued on ``device`` has finished."""
    if getattr(device, "type", str(device)) != "cuda":
        return time.perf_counter
    import torch

    def synced() -> float:
        torch.cuda.synchronize(device)
        return time.perf_counter()

    return synced
