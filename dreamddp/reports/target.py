"""Time to target: the one definition every table and benchmark uses.

The training seconds (sum of iteration times: evaluation, start-up and
DreamDDP's profiling excluded) until a metric first reaches the target.  The
metric is the run's evaluation series where it has one (``eval_points``), or
its training loss averaged over the last ``SMOOTH`` iterations where it
evaluates too rarely (``train_loss_points``: the benchmark's short runs).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Optional

SMOOTH = 10  # iterations in the moving average of the training loss


def time_to_target(points: Iterable[tuple[float, float]], target: float, higher_is_better: bool = False) -> Optional[float]:
    """The first ``elapsed`` of ``(elapsed, value)`` points whose value reaches ``target`` (None: never)."""
    for elapsed, value in points:
        if value is not None and elapsed is not None and (value >= target if higher_is_better else value <= target):
            return float(elapsed)
    return None


def eval_points(run, metric: str) -> list[tuple[float, float]]:
    """(training seconds, metric) at each evaluation (a collected record's ``elapsed``; ``run``: records.Record)."""
    return [(e.elapsed, e.get(metric)) for e in run.evaluation]


def train_loss_points(rows: list, smooth: int = SMOOTH) -> list[tuple[float, float]]:
    """(training seconds, training loss averaged over the last ``smooth`` iterations) per iteration
    (``rows``: records.Row)."""
    out, elapsed = [], 0.0
    losses = [r.loss for r in rows]
    for i, r in enumerate(rows):
        elapsed += r.time
        out.append((elapsed, statistics.fmean(losses[max(0, i - smooth + 1): i + 1])))
    return out
