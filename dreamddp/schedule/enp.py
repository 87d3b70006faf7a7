"""PLSGD-ENP: the equal-number-partition baseline schedule.

Units in backward order are cut into contiguous chunks of ``ceil(L / H)``
units; chunk g (counted from the output side) syncs in iteration g.  This is
the authors' remainder rule: every chunk is full except the last non-empty one,
and when ``ceil(L / H) * (H - 1) >= L`` the trailing iterations get no unit
(L = 12, H = 10 gives six chunks of 2 and four empty iterations).  Their
modelled PLSGD-ENP times are reproduced only with this rule.
"""

from __future__ import annotations

import math


def enp_sizes(L: int, H: int) -> list[int]:
    """Number of units synced in each iteration 0..H-1."""
    if H < 1:
        raise ValueError(f"H must be >= 1, got {H}")
    per = math.ceil(L / H) if L else 0
    return [max(0, min(per, L - g * per)) for g in range(H)]


def enp(units_backward: list[str], H: int) -> dict[str, list[int]]:
    """Schedule unit -> [iteration] with equal-count contiguous chunks."""
    out: dict[str, list[int]] = {}
    start = 0
    for g, size in enumerate(enp_sizes(len(units_backward), H)):
        for u in units_backward[start : start + size]:
            out[u] = [g]
        start += size
    return out
