"""``dreamddp-bench accuracy --real-link DIR``: the simulator against DIR's runs on the shaped (tc) link.

Two predictions per run: a-priori (its own ``summary.predicted``, made before it trained: every
repetition held out, and the targets are checked on it) and same-job (accuracy.py's, calibrated on
the repetition's own compute-only runs)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from dreamddp.atomic import write_csv
from dreamddp.reports import records
from dreamddp.reports.accuracy_measures import by_algorithm, error_stats
from dreamddp.reports.render import write_readme

TARGETS = {"median": 0.05, "p95": 0.10}  # issue 82's, on the a-priori absolute error


def write(bench_dir: str, out: str, *, title: str | None = None, made_by: str | None = None,
          mix: bool = False) -> list[str]:
    from dreamddp.reports.accuracy import rows_of

    # the ratio the rate was calibrated for (the same for every model)
    ratio = json.loads(next(Path(bench_dir).glob("calibration/*/calibration.json")).read_text())["ratio"]
    tc = str(Path(bench_dir) / "tc" / "runs")
    mixed = records.check_provenance(records.bench(tc).records(), mix, f"report {out}")
    rows = [{**r, "apriori_error": r["in_run_s"] / r["measured_s"] - 1} for r in rows_of(tc, float(ratio))
            if r.get("in_run_s")]
    if not rows:
        raise SystemExit(f"accuracy: no tc run with a prediction under {bench_dir}/tc/runs")
    med, p95 = error_stats(r["apriori_error"] for r in rows)
    same_med, same_p95 = error_stats(r["error"] for r in rows)
    table = by_algorithm(rows, sorted({r["model"] for r in rows}), measured=lambda r: r["measured_s"],
                         apriori=lambda r: 100 * r["apriori_error"], same_job=lambda r: 100 * r["error"])
    readme = write_readme(out, "accuracy_tc.md.j2", title=title or "The simulator against the real shaped link",
                          mixed=mixed, made_by=made_by or f"dreamddp-bench accuracy --real-link {bench_dir} --out {out}",
                          bench_dir=bench_dir, rel=os.path.relpath(bench_dir, out), runs=len(rows), median=med, p95=p95,
                          targets=TARGETS, met=med <= TARGETS["median"] and p95 <= TARGETS["p95"],
                          same_median=same_med, same_p95=same_p95, table=table)
    keep = ("model", "rep", "algorithm", "measured_s", "in_run_s", "apriori_error", "predicted_s", "error")
    write_csv(Path(out) / "accuracy.csv", [{k: r[k] for k in keep} for r in rows])
    return [readme, str(Path(out) / "accuracy.csv")]
