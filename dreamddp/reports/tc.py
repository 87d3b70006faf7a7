"""``<out>/README.md`` of ``dreamddp-bench run --link tc``: the real link beside its emulated twin.

Per model and algorithm, medians over repetitions with the min-max spread: the mean iteration
time under tc and emulated at the same rate, tc / emulated (inside each repetition), the
exposed wait and payload bytes under tc, and the ratios over DreamDDP and over FLSGD on
each link.  Then the a-priori prediction against the tc measurement: each run's own
``summary.predicted``, made before it trained from its start-up profile alone (no
measurement of the run it predicts, nothing tuned on these runs), its error per run and the
median and 95th percentile over runs.  Each link's own full report is
``<out>/<link>/README.md`` (report.py).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from dreamddp.atomic import write_csv, write_text
from dreamddp.reports import bench as report
from dreamddp.reports.predict import mean_iteration, timed_mean
from dreamddp.bench.regime import batch
from dreamddp.bench.segments import TIMED
from dreamddp.reports.spread import fmt_spread, median_spread
from dreamddp.run.summary import quantile



def rows(tc: dict, em: dict, model: str) -> list[dict]:
    """One row per timed algorithm (spreads as (median, min, max))."""
    t, e = tc.get(model, {}), em.get(model, {})
    out = []
    for label in TIMED:
        if not any(label in s for s in t.values()):
            continue
        row = {"model": model, "algorithm": label,
               "tc_s": median_spread([mean_iteration(s[label]) for s in t.values() if label in s]),
               "emulated_s": median_spread([mean_iteration(s[label]) for s in e.values() if label in s]),
               "tc_over_emulated": median_spread([mean_iteration(t[r][label]) / mean_iteration(e[r][label])
                                                  for r in t if label in t[r] and label in e.get(r, {})]),
               "tc_wait_ms": median_spread([1e3 * timed_mean(s[label], "wait") for s in t.values() if label in s]),
               "mib_per_iteration": median_spread([s[label]["summary"]["bytes_per_iteration"] / 2**20
                                                   for s in t.values() if label in s])}
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
            for label in TIMED:
                rec = segs.get(label)
                predicted = (rec or {}).get("summary", {}).get("predicted") or {}
                if predicted.get("mean_iteration_time"):
                    measured = rec["summary"]["mean_iteration_time"]
                    out.append({"model": model, "rep": rep, "algorithm": label, "measured_s": measured,
                                "predicted_s": predicted["mean_iteration_time"],
                                "error": predicted["mean_iteration_time"] / measured - 1})
    return out


def write(out: str, runs: list[str]) -> str:
    tc, em = report.load(runs[0]), report.load(runs[1])
    made = json.loads((Path(runs[0]) / "bench.json").read_text())
    lines = ["# Benchmark on real shaped links: tc beside the emulated link at the same rate", "",
             f"Made by `{report.made_by(made['args'])}`; rebuilt by "
             "`dreamddp-bench report` from the run records under `tc/runs/` and `emulated/runs/`. Every algorithm "
             "ran as its own job, tc then emulated, the algorithms in an order rotated per repetition; the rate "
             "was set once per model so that S-SGD's exposed wait over its backward is the given ratio on the "
             "real link (`calibration/<model>/calibration.json`). Medians over repetitions, min-max in brackets; "
             "a ratio is taken inside one repetition before its median. Each link's full report: "
             "[tc/README.md](tc/README.md), [emulated/README.md](emulated/README.md).", ""]
    csv_rows = []
    for model in tc:
        rec = next(iter(next(iter(tc[model].values())).values()))
        gbps = rec["config"]["bandwidth"]["gbps"]
        lines += [f"## {model}: {rec['config']['model']['name']}/{rec['config']['model']['size']}, "
                  f"{batch(rec)}, {rec['extra']['world_size']} workers, {1e3 * gbps:.4g} Mbit/s, "
                  f"{len(tc[model])} repetitions", "",
                  "| algorithm | tc s | emulated s | tc / emulated | tc exposed wait ms | MiB / iteration | "
                  "x DreamDDP tc | x DreamDDP emulated | x FLSGD tc | x FLSGD emulated |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows(tc, em, model):
            csv_rows.append(r)
            lines.append(f"| {r['algorithm']} | {fmt_spread(r['tc_s'])} | {fmt_spread(r['emulated_s'])} | "
                         f"{fmt_spread(r['tc_over_emulated'], 3)} | {fmt_spread(r['tc_wait_ms'], 1)} | "
                         f"{fmt_spread(r['mib_per_iteration'], 3)} | {fmt_spread(r['tc_x_dreamddp'], 2)} | "
                         f"{fmt_spread(r['emulated_x_dreamddp'], 2)} | {fmt_spread(r['tc_x_flsgd'], 2)} | "
                         f"{fmt_spread(r['emulated_x_flsgd'], 2)} |")
        lines.append("")
    pred = apriori(tc)
    if pred:
        errors = sorted(abs(p["error"]) for p in pred)
        lines += ["## A-priori prediction against the real link", "",
                  f"{len(pred)} tc runs: median absolute error {statistics.median(errors):.1%}, 95th percentile "
                  f"{quantile(errors, 0.95):.1%}. Each run's prediction is its own, made before it trained from its "
                  "start-up profile and plan alone (`summary.predicted`).", "",
                  "| model | algorithm | runs | measured s | predicted s | error |", "|---|---|---|---|---|---|"]
        for model in tc:
            for label in TIMED:
                mine = [p for p in pred if p["model"] == model and p["algorithm"] == label]
                if mine:
                    lines.append(f"| {model} | {label} | {len(mine)} | "
                                 f"{fmt_spread(median_spread([p['measured_s'] for p in mine]))} | "
                                 f"{fmt_spread(median_spread([p['predicted_s'] for p in mine]))} | "
                                 f"{fmt_spread(median_spread([100 * p['error'] for p in mine]), 1)} % |")
        lines.append("")
        write_csv(Path(out) / "apriori.csv", pred)
    write_text(Path(out) / "README.md", "\n".join(lines) + "\n")
    if csv_rows:
        write_csv(Path(out) / "tc.csv", [{k: (v[0] if isinstance(v, tuple) else v) for k, v in r.items()} for r in csv_rows])
    return str(Path(out) / "README.md")
