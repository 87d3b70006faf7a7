"""``<dir>/README.md`` over several benchmark folders of one study (``make bench-latency``'s
``<dir>/<ms>ms``, ``make bench-methods``' ``<dir>/ratio<r>``, ``make bench-unequal``'s
``<dir>/<setting>``): one row per folder, model and algorithm, so a setting's effect reads down a
column.

Per row, medians over repetitions with the min-max spread: the mean iteration time, bytes per
iteration, the ratios over DreamDDP and over FLSGD (each taken inside one repetition before its
median), the simulator against the measured time (a-priori: each run's own ``summary.predicted``,
made before it trained; same-job: report.py's *predicted*) and the time to the folder's loss
target.  Where a folder is named ``BASELINE`` (the study's equal-workers setting), each row also
gives its iteration time over the same algorithm's there.  That ratio is across jobs, and each job
calibrates its link to its own backward while the host's speed drifts between jobs, so each
repetition's time is first taken in units of its job's calibrated full-speed backward (the link
is a fixed multiple of it, and the compute moves with it): the ratio of those medians.  Each
folder's own full report is ``<dir>/<folder>/README.md`` (report.py).
"""

from __future__ import annotations

import json
from pathlib import Path

from dreamddp.atomic import write_csv, write_text
from dreamddp.reports import bench as report
from dreamddp.reports.predict import mean_iteration
from dreamddp.bench.segments import TIMED
from dreamddp.reports.spread import fmt_spread, median_spread

BASELINE = "equal"


def folders(out: Path) -> list[Path]:
    """The benchmark folders directly under ``out``, in name order (numbers by value)."""
    found = [p for p in out.iterdir() if (p / "runs" / "bench.json").is_file()]
    key = lambda p: (float("".join(c for c in p.name if c.isdigit() or c == ".") or "inf"), p.name)  # noqa: E731
    return sorted(found, key=key)


def _in_backwards(rec: dict) -> float:
    """The run's mean iteration in units of its job's calibrated full-speed backward."""
    calibration = json.loads((Path(rec["_dir"]).parent / "calibration.json").read_text())
    return mean_iteration(rec) / calibration["backward_s"]


def _apriori(rec: dict) -> float | None:
    predicted = (rec["summary"].get("predicted") or {}).get("mean_iteration_time")
    return predicted / mean_iteration(rec) if predicted else None


def rows(folder: Path) -> list[dict]:
    """The folder's rows; writes its own report on the way (report.write)."""
    data = report.load(str(folder / "runs"))
    made = {(r["model"], r["algorithm"]): r for r in report.write(str(folder / "runs"), str(folder), data)}
    out = []
    for model, reps in data.items():
        for label in TIMED:
            mine = [s[label] for s in reps.values() if label in s]
            if not mine:
                continue
            full = made.get((model, label), {})
            row = {"setting": folder.name, "model": model, "algorithm": label, "reps": len(mine),
                   "iteration_s": median_spread(mean_iteration(r) for r in mine),
                   "iteration_backwards": median_spread(_in_backwards(r) for r in mine),
                   "mib_per_iteration": median_spread(r["summary"]["bytes_per_iteration"] / 2**20 for r in mine)}
            for ref in report.REFERENCES:
                row[f"x_{ref}"] = report.ratio_over(reps, label, ref)
            row.update(apriori_over_measured=median_spread(_apriori(r) for r in mine),
                       predicted_over_measured=full.get("predicted_over_measured"),
                       time_to_target_s=full.get("time_to_target_s"))
            out.append(row)
    return out


def _over_baseline(all_rows: list[dict]) -> None:
    base = {(r["model"], r["algorithm"]): r["iteration_backwards"] for r in all_rows if r["setting"] == BASELINE}
    for r in all_rows:
        b = base.get((r["model"], r["algorithm"]))
        r[f"x_{BASELINE}"] = None if b is None else r["iteration_backwards"][0] / b[0]


def write(out: str) -> str:
    root = Path(out)
    subs = folders(root)
    if not subs:
        raise SystemExit(f"report: no benchmark folders (<name>/runs/bench.json) under {out}")
    all_rows = [row for sub in subs for row in rows(sub)]
    baseline = any(s.name == BASELINE for s in subs)
    if baseline:
        _over_baseline(all_rows)
    lines = [f"# {root.name}: one study over {len(subs)} settings", "",
             f"Made by `dreamddp-bench report {out}` from the run records of "
             + ", ".join(f"[{s.name}]({s.name}/README.md)" for s in subs)
             + " (each made by the command its own README names). Medians over repetitions, min-max in brackets; "
             "a ratio is taken inside one repetition before its median. Predicted / measured: the simulator's mean "
             "iteration time over the measured one, a-priori (each run's own prediction, made before it trained from "
             "its start-up profile, plan and settings) and same-job (on the repetition's compute-only runs and "
             "recorded link). Time to target: training seconds until the smoothed training loss reaches the "
             "setting's target (the highest final loss among its timed runs; its README)."
             + (f" x {BASELINE}: the iteration time over the same algorithm's in the {BASELINE} setting, each first "
                "in units of its job's calibrated full-speed backward (every job calibrates its link to that, and the "
                "host's speed drifts between jobs): a ratio of medians across jobs." if baseline else ""), "",
             "| setting | model | algorithm | reps | iteration s | MiB / iteration | x DreamDDP | x FLSGD | "
             + (f"x {BASELINE} | " if baseline else "")
             + "a-priori / measured | same-job / measured | time to target s |",
             "|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if baseline else "")]
    for r in all_rows:
        lines.append(f"| {r['setting']} | {r['model']} | {r['algorithm']} | {r['reps']} | "
                     f"{fmt_spread(r['iteration_s'])} | {fmt_spread(r['mib_per_iteration'], 3)} | "
                     f"{fmt_spread(r['x_dreamddp'], 2)} | {fmt_spread(r['x_flsgd'], 2)} | "
                     + (f"{'n/a' if r[f'x_{BASELINE}'] is None else format(r[f'x_{BASELINE}'], '.2f')} | "
                        if baseline else "")
                     + f"{fmt_spread(r['apriori_over_measured'], 2)} | {fmt_spread(r['predicted_over_measured'], 2)} | "
                     f"{fmt_spread(r['time_to_target_s'], 1)} |")
    write_text(root / "README.md", "\n".join(lines) + "\n")
    write_csv(root / "study.csv", [{k: (v[0] if isinstance(v, tuple) else v) for k, v in r.items()}
                                   for r in all_rows])
    return str(root / "README.md")
