"""``<out>/README.md`` of ``dreamddp-bench run --link tc``: the real link beside its emulated twin.

Per model and algorithm, medians over repetitions with the min-max spread: the mean iteration
time under tc and emulated at the same rate, tc / emulated (inside each repetition), the
exposed wait and wire bytes per worker under tc, and the ratios over DreamDDP and over FLSGD on
each link.  Then the a-priori prediction against the tc measurement: each run's own
``summary.predicted``, made before it trained from its start-up profile alone (no
measurement of the run it predicts, nothing tuned on these runs), its error per run and the
median and 95th percentile over runs.  Each link's own full report is
``<out>/<link>/README.md`` (report.py).
"""

from __future__ import annotations

import statistics
from pathlib import Path

from dreamddp.atomic import write_csv
from dreamddp.reports import bench as report
from dreamddp.reports import card, records
from dreamddp.bench.regime import batch
from dreamddp.bench.segments import TIMED
from dreamddp.reports.render import table, write_readme
from dreamddp.reports.spread import fmt_spread, median_spread
from dreamddp.run.summary import quantile


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
    out = []
    for model, reps in tc.items():
        for rep, segs in sorted(reps.items()):
            for label in records.ordered(lb for lb in segs if lb in TIMED):
                rec = segs[label]
                if rec.predicted_mean:
                    out.append({"model": model, "rep": rep, "algorithm": label, "measured_s": rec.mean_iteration,
                                "predicted_s": rec.predicted_mean, "error": rec.predicted_mean / rec.mean_iteration - 1})
    return out


def write_all(folder: str, out: str, *, title: str | None = None, made_by: str | None = None,
              mix: bool = False) -> list[str]:
    """Each link's report (bench.py), then ``out``/README.md side by side, tc.csv, apriori.csv and the
    card's loss_vs_time.png of the real link's runs."""
    trees = [str(Path(folder) / link / "runs") for link in ("tc", "emulated")]
    for tree in trees:
        if not (Path(tree) / "bench.json").is_file():
            raise SystemExit(f"report: {tree}: no bench.json (not a dreamddp-bench run --link tc folder)")
    found = [r for tree in trees for r in records.bench(tree).records()]
    mixed = records.check_provenance(found, mix, f"report {out}")
    for tree in trees:
        report.write(tree, str(Path(tree).parent), mix=mix, figure=False)
    tc, em = report.load(trees[0]), report.load(trees[1])
    models = []
    for model in tc:
        rec = next(iter(next(iter(tc[model].values())).values()))
        mine = rows(tc, em, model)
        result = table(["algorithm", "tc s", "emulated s", "tc / emulated", "tc exposed wait ms", "wire MiB/it",
                      "x DreamDDP tc", "x FLSGD tc"],
                     [[r["algorithm"], fmt_spread(r["tc_s"]), fmt_spread(r["emulated_s"]), fmt_spread(r["tc_over_emulated"], 3),
                       fmt_spread(r["tc_wait_ms"], 1), fmt_spread(r["wire_mib"], 3), fmt_spread(r["tc_x_dreamddp"], 2),
                       fmt_spread(r["tc_x_flsgd"], 2)] for r in mine])
        emulated = table(["algorithm", "x DreamDDP emulated", "x FLSGD emulated"],
                         [[r["algorithm"], fmt_spread(r["emulated_x_dreamddp"], 2), fmt_spread(r["emulated_x_flsgd"], 2)]
                          for r in mine])
        models.append({"name": model, "record": rec, "batch": batch(rec.raw), "reps": len(tc[model]),
                       "mbit": 1e3 * rec.bandwidth.get("gbps"), "rows": mine, "card": result, "emulated": emulated})
    pred = apriori(tc)
    errors = sorted(abs(p["error"]) for p in pred)
    by_algo = [{"model": model, "algorithm": label, "runs": len(mine),
                "measured": median_spread([p["measured_s"] for p in mine]),
                "predicted": median_spread([p["predicted_s"] for p in mine]),
                "error": median_spread([100 * p["error"] for p in mine])}
               for model in tc for label in records.ordered(p["algorithm"] for p in pred)
               if (mine := [p for p in pred if p["model"] == model and p["algorithm"] == label])]
    written = [write_readme(out, "tc.md.j2", title=title or "Benchmark on real shaped links: tc beside the emulated link "
                            "at the same rate", mixed=mixed,
                            made_by=made_by or report.made_by(records.bench(trees[0]).args), models=models,
                            predictions=by_algo, runs=len(pred),
                            median=statistics.median(errors) if errors else None,
                            p95=quantile(errors, 0.95) if errors else None)]
    if pred:
        write_csv(Path(out) / "apriori.csv", pred)
        written.append(str(Path(out) / "apriori.csv"))
    csv_rows = [r for m in models for r in m["rows"]]
    if csv_rows:
        write_csv(Path(out) / "tc.csv", [{k: (v[0] if isinstance(v, tuple) else v) for k, v in r.items()} for r in csv_rows])
        written.append(str(Path(out) / "tc.csv"))
    shown = [r for r in records.bench(trees[0]).records() if r.label in TIMED]
    if shown:
        written.append(str(card.write_figure(shown, Path(out) / "loss_vs_time.png")))
    return written
