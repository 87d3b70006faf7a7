"""The simulator-accuracy study's measures over its rows (one per timed run): the error's median and
95th percentile, and whether the predictions order the algorithms as measured, per configuration,
by pairs of runs and over the repetitions' medians."""

from __future__ import annotations

import collections
import statistics

from dreamddp.reports.records import ordered
from dreamddp.reports.spread import median_spread
from dreamddp.run.summary import quantile

TIE = 0.02  # runs measured closer are a tie: one algorithm moves 1-3% between repetitions of make bench
FAR = 0.05  # a misordered pair measured this far apart is named, with its runs' compute


def by_job(rows: list[dict]) -> dict[tuple, list[dict]]:
    """The rows of each (model, ratio, repetition), in their order, jobs sorted."""
    jobs = collections.defaultdict(list)
    for r in rows:
        jobs[(r["model"], r["ratio"], r["rep"])].append(r)
    return dict(sorted(jobs.items()))


def error_stats(errors) -> tuple[float | None, float | None]:
    """The median and 95th percentile of the errors' absolute values (None, None where there are none)."""
    errors = sorted(abs(e) for e in errors)
    return (statistics.median(errors), quantile(errors, 0.95)) if errors else (None, None)


def by_algorithm(rows: list[dict], models, **columns) -> list[dict]:
    """Per model (in ``models``' order) and algorithm (display order) of ``rows``: how many, and
    each of ``columns``' median (spread) of its function of a row."""
    return [{"model": model, "algorithm": label, "runs": len(mine),
             **{key: median_spread(of(r) for r in mine) for key, of in columns.items()}}
            for model in models for label in ordered(r["algorithm"] for r in rows)
            if (mine := [r for r in rows if r["model"] == model and r["algorithm"] == label])]


def accuracy(rows: list[dict], error: str = "error", predicted: str = "predicted_s") -> tuple:
    """(median, 95th percentile of |``error``|, configurations ordered right, right counting ties, configurations)."""
    ranks = ranking(rows, predicted)
    return (*error_stats(r[error] for r in rows), sum(r["right"] for r in ranks),
            sum(r["right_but_ties"] for r in ranks), len(ranks))


def ranking(rows: list[dict], predicted: str = "predicted_s") -> list[dict]:
    """Per configuration: does the ``predicted`` order equal the measured one?"""
    out = []
    for cfg, mine in by_job(rows).items():
        swapped = swapped_pairs(mine, predicted)
        out.append({"model": cfg[0], "ratio": cfg[1], "rep": cfg[2], "right": not swapped,
                    "right_but_ties": all(b["measured_s"] / a["measured_s"] - 1 < TIE for a, b in swapped),
                    "swapped": [f"{a['algorithm']} < {b['algorithm']} by {100 * (b['measured_s'] / a['measured_s'] - 1):.1f}%"
                                for a, b in swapped]})
    return out


def swapped_pairs(runs: list[dict], predicted: str = "predicted_s") -> list[tuple[dict, dict]]:
    """(a, b) of one configuration with a measured faster and predicted slower."""
    return [(a, b) for a in runs for b in runs if a["measured_s"] < b["measured_s"] and a[predicted] > b[predicted]]


def median_ranking(rows: list[dict]) -> list[dict]:
    """Per model and ratio run in several repetitions: ``ranking`` of the algorithms' medians, each
    time first over its job's geometric mean measured time, so a slow hour of the host weighs no more."""
    scale = {job: statistics.geometric_mean(r["measured_s"] for r in runs) for job, runs in by_job(rows).items()}
    by_config = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in rows:
        by_config[(r["model"], r["ratio"])][r["algorithm"]].append(r)
    out = []
    for (model, ratio), algos in sorted(by_config.items()):
        reps = len({r["rep"] for runs in algos.values() for r in runs})
        if reps < 2:
            continue
        of_job = lambda r, key: r[key] / scale[(model, ratio, r["rep"])]  # noqa: E731
        medians = [{"model": model, "ratio": ratio, "rep": "median", "algorithm": a,
                    "measured_s": statistics.median(of_job(r, "measured_s") for r in runs),
                    "predicted_s": statistics.median(of_job(r, "predicted_s") for r in runs)}
                   for a, runs in algos.items()]
        out.append({**ranking(medians)[0], "reps": reps})
    return out
