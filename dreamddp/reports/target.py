"""Time to target, the one definition: the training seconds (sum of iteration times) until a metric
first reaches the target, on the run's evaluations or on its smoothed training loss."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Optional

SMOOTH = 10  # iterations in the moving average of the training loss


def time_to_target(points: Iterable[tuple[float, float]], target: float,
                   higher_is_better: bool = False) -> Optional[float]:
    """The first ``elapsed`` of ``(elapsed, value)`` points whose value reaches ``target`` (None: never)."""
    for elapsed, value in points:
        if value is not None and elapsed is not None and (value >= target if higher_is_better else value <= target):
            return float(elapsed)
    return None


def eval_points(run, metric: str) -> list[tuple[float, float]]:
    """(training seconds, metric) at each evaluation of a records.Record (a collected record's ``elapsed``)."""
    return [(e.elapsed, e.get(metric)) for e in run.evaluation]


def train_loss_points(rows: list, smooth: int = SMOOTH) -> list[tuple[float, float]]:
    """(training seconds, training loss averaged over the last ``smooth`` iterations) per records.Row."""
    out, elapsed = [], 0.0
    losses = [r.loss for r in rows]
    for i, r in enumerate(rows):
        elapsed += r.time
        out.append((elapsed, statistics.fmean(losses[max(0, i - smooth + 1): i + 1])))
    return out
