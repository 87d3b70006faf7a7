"""``<out>/README.md`` of ``dreamddp-bench run --link tc``: the real link beside its emulated twin at
the same rate, and each tc run's own a-priori prediction (``summary.predicted``) against it."""

from __future__ import annotations

from pathlib import Path

from dreamddp.atomic import write_csv
from dreamddp.reports import bench as report
from dreamddp.reports import card, records, versions
from dreamddp.reports.accuracy_measures import by_algorithm, error_stats
from dreamddp.reports.regime import batch
from dreamddp.reports.labels import TIMED
from dreamddp.reports.render import spread_table, write_readme
from dreamddp.reports.spread import median_spread, medians


def rows(tc: dict, em: dict, model: str) -> list[dict]:
    """One row per timed algorithm (spreads as (median, min, max))."""
    t, e = tc.get(model, {}), em.get(model, {})
    out = []
    for label in records.ordered(lb for s in t.values() for lb in s if lb in TIMED):
        row = {"model": model, "algorithm": label,
               "tc_s": median_spread([s[label].mean_iteration for s in t.values() if label in s]),
               "emulated_s": median_spread([s[label].mean_iteration for s in e.values() if label in s]),
               "tc_over_emulated": median_spread([t[r][label].mean_iteration / e[r][label].mean_iteration
                                                  for r in t if label in t[r] and label in e.get(r, {})]),
               "tc_wait_ms": median_spread([1e3 * s[label].timed_mean("wait") for s in t.values() if label in s]),
               "wire_mib": median_spread([s[label].wire_per_iteration() / 2**20 for s in t.values() if label in s])}
        for ref in report.REFERENCES:
            row[f"tc_x_{ref}"] = report.ratio_over(t, label, ref)
            row[f"emulated_x_{ref}"] = report.ratio_over(e, label, ref)
        out.append(row)
    return out


def apriori(tc: dict) -> list[dict]:
    """Per tc run with a prediction: measured and predicted mean iteration, the error."""
    return [{"model": model, "rep": rep, "algorithm": label, "measured_s": rec.mean_iteration,
             "predicted_s": rec.predicted_mean, "error": rec.predicted_mean / rec.mean_iteration - 1}
            for model, reps in tc.items() for rep, segs in sorted(reps.items())
            for label in records.ordered(lb for lb in segs if lb in TIMED) if (rec := segs[label]).predicted_mean]


def write_all(folder: str, out: str, *, title: str | None = None, made_by: str | None = None,
              mix: bool = False) -> list[str]:
    """Each link's report (bench.py), then ``out``/README.md side by side, tc.csv, apriori.csv and the
    card's loss_vs_time.png of the real link's runs."""
    trees = [str(Path(folder) / link / "runs") for link in ("tc", "emulated")]
    benches = [records.bench_of(tree, "report", "a dreamddp-bench run --link tc folder") for tree in trees]
    mixed, code = versions.check_provenance([r for b in benches for r in b.records()], mix, f"report {out}")
    for tree in trees:
        report.write(tree, str(Path(tree).parent), mix=mix, figure=False)
    tc, em = report.load(trees[0]), report.load(trees[1])
    models = []
    for model in tc:
        rec = next(iter(next(iter(tc[model].values())).values()))
        mine = rows(tc, em, model)
        result = spread_table(mine, [("algorithm", "algorithm", None), ("tc s", "tc_s", 3),
                                     ("emulated s", "emulated_s", 3), ("tc / emulated", "tc_over_emulated", 3),
                                     ("tc exposed wait ms", "tc_wait_ms", 1),
                                     ("wire MiB/it", "wire_mib", 3), ("x DreamDDP tc", "tc_x_dreamddp", 2),
                                     ("x FLSGD tc", "tc_x_flsgd", 2)])
        emulated = spread_table(mine, [("algorithm", "algorithm", None),
                                       ("x DreamDDP emulated", "emulated_x_dreamddp", 2),
                                       ("x FLSGD emulated", "emulated_x_flsgd", 2)])
        models.append({"name": model, "record": rec, "batch": batch(rec), "reps": len(tc[model]),
                       "mbit": 1e3 * rec.bandwidth_gbps, "rows": mine, "card": result, "emulated": emulated})
    pred = apriori(tc)
    median, p95 = error_stats(p["error"] for p in pred)
    by_algo = by_algorithm(pred, tc, measured=lambda p: p["measured_s"], predicted=lambda p: p["predicted_s"],
                           error=lambda p: 100 * p["error"])
    written = [write_readme(out, "tc.md.j2", title=title, mixed=mixed, code=code, made_by=made_by or report.made_by(benches[0]),
                            models=models, predictions=by_algo, runs=len(pred), median=median, p95=p95)]
    csvs = {"apriori.csv": pred, "tc.csv": medians([r for m in models for r in m["rows"]])}
    for name, content in csvs.items():
        if content:
            write_csv(Path(out) / name, content)
            written.append(str(Path(out) / name))
    shown = [r for r in benches[0].records() if r.label in TIMED]
    if shown:
        written.append(str(card.write_figure(shown, Path(out) / "loss_vs_time.png")))
    return written
