"""A median with its min-max spread, the one way the benchmark and the studies report repeated runs."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Optional

Spread = tuple[float, float, float]  # (median, min, max)


def median_spread(values: Iterable[Optional[float]]) -> Optional[Spread]:
    """The median, min and max of the values that are not None; None when none is."""
    values = [v for v in values if v is not None]
    return (statistics.median(values), min(values), max(values)) if values else None


def fmt_spread(m: Optional[Spread], digits: int = 3, collapse: bool = False) -> str:
    """``median (min-max)``; ``collapse``: the median alone where min and max are one value."""
    if m is None:
        return "n/a"
    return f"{m[0]:.{digits}f}" + ("" if collapse and m[1] == m[2] else f" ({m[1]:.{digits}f}-{m[2]:.{digits}f})")


def medians(rows: list[dict]) -> list[dict]:
    """Rows for a CSV: each spread by its median."""
    return [{k: (v[0] if isinstance(v, tuple) else v) for k, v in r.items()} for r in rows]
