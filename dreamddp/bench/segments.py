"""A benchmark job's runs ("segments"), by their labels in runners/catalogue/runs.yaml: their command
lines, which jobs.py runs (dreamddp/reports/labels.py groups the same labels for the reports)."""

from __future__ import annotations

import os
import statistics

from dreamddp.study import catalogue_runs

_ALL = catalogue_runs()  # label -> RunEntry, in the catalogue's order
# DDP's bucket cap in ddp+1bucket@ideal, above any model's size: one bucket
ONE_BUCKET_MB = int(next(o for o in _ALL["ddp+1bucket@ideal"].overrides
                         if o.startswith("algo.bucket_cap_mb=")).split("=", 1)[1])
# every worker at full speed: the link's rate (and a timed window) belongs to the link and the
# model, whatever --set slows the workers of the timed runs
FULL_SPEED = ["cluster.worker_speed=null", "cluster.slow_spell.p=0"]


def steady(rows: list[dict], field: str) -> float:
    """The median ``field`` of a calibration run's rows over their middle half: the first passes warm
    up, and in the last ones the other ranks have finished and left rank 0 a core of its own."""
    n = len(rows)
    return statistics.median(r[field] for r in rows[n // 4: max(n // 4 + 1, 3 * n // 4)])


def calibration_overrides(spec: dict) -> list[str]:
    """The job's calibration run, whose backward fixes the emulated rate: nosync, ideal link, full speed."""
    return spec["base"] + ["algo=nosync", "bandwidth=ideal", *FULL_SPEED,
                           f"train.iterations={spec['calibration_iterations']}"]


def _window_s(spec: dict, seg: dict, calibration: dict) -> list[str]:
    if not seg.get("window"):
        return []
    if calibration.get("iteration_s") is None:
        raise ValueError(f"segment {seg['label']}: its window needs the calibration's iteration_s")
    H = int(next(o for o in reversed(spec["base"]) if o.startswith("algo.H=")).split("=", 1)[1])
    return [f"algo.window_s={seg['window'] * H * calibration['iteration_s']:.6g}"]


def segment_overrides(spec: dict, seg: dict, calibration: dict, memory: bool = False,
                      schedule: bool = True) -> list[str]:
    """A segment's whole command line in the job of ``spec``: the base, its own overrides, a timed
    window, its link (the emulated one at the calibrated rate), the schedule it runs on
    (``schedule_from``'s, written by that run: ``schedule=False`` before the job) and its iterations."""
    gbps = calibration["gbps"]
    link = ["bandwidth=ideal"] if seg["link"] == "ideal" else ["bandwidth=1gbit", f"bandwidth.gbps={gbps}"]
    if seg["link"] != "ideal" and spec.get("latency_ms"):
        link.append(f"bandwidth.latency_ms={spec['latency_ms']}")
    extra = [f"algo.schedule={os.path.join(spec['out'], seg['schedule_from'], 'schedule.json')}"] \
        if schedule and seg.get("schedule_from") else []
    iterations = spec["memory_iterations"] if memory else spec["iterations"]
    return spec["base"] + seg["overrides"] + _window_s(spec, seg, calibration) + link + extra \
        + [f"train.iterations={iterations}"]
