"""``<dir>/README.md`` over several benchmark folders of one study (``make bench-latency``'s
``<dir>/<ms>ms``, ``make bench-methods``' ``<dir>/ratio<r>``, ``make bench-unequal``'s
``<dir>/<setting>``): one row per folder, model and algorithm, so a setting's effect reads down a
column.

Per row, medians over repetitions with the min-max spread: the mean iteration time, wire bytes
per worker per iteration, the ratios over DreamDDP and over FLSGD (each taken inside one repetition before its
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

from pathlib import Path

from dreamddp.atomic import write_csv
from dreamddp.reports import bench as report
from dreamddp.reports import records
from dreamddp.bench.segments import TIMED
from dreamddp.reports.render import table, write_readme
from dreamddp.reports.spread import fmt_spread, median_spread

BASELINE = "equal"


def folders(out: Path) -> list[Path]:
    """The benchmark folders directly under ``out``, in name order (numbers by value)."""
    found = [p for p in out.iterdir() if (p / "runs" / "bench.json").is_file()]
    key = lambda p: (float("".join(c for c in p.name if c.isdigit() or c == ".") or "inf"), p.name)  # noqa: E731
    return sorted(found, key=key)


def _in_backwards(rec: records.Record) -> float:
    """The run's mean iteration in units of its job's calibrated full-speed backward."""
    return rec.mean_iteration / rec.calibration().backward_s


def _apriori(rec: records.Record) -> float | None:
    return rec.predicted_mean / rec.mean_iteration if rec.predicted_mean else None


def rows(folder: Path, mix: bool = False) -> list[dict]:
    """The folder's rows; writes its own report on the way (report.write)."""
    data = report.load(str(folder / "runs"))
    made = {(r["model"], r["algorithm"]): r for r in report.write(str(folder / "runs"), str(folder), data, mix=mix)}
    out = []
    for model, reps in data.items():
        for label in records.ordered(lb for s in reps.values() for lb in s if lb in TIMED):
            mine = [s[label] for s in reps.values() if label in s]
            full = made.get((model, label), {})
            row = {"setting": folder.name, "model": model, "algorithm": label, "reps": len(mine),
                   "iteration_s": median_spread(r.mean_iteration for r in mine),
                   "iteration_backwards": median_spread(_in_backwards(r) for r in mine),
                   "wire_mib": median_spread(r.wire_per_iteration() / 2**20 for r in mine)}
            for ref in report.REFERENCES:
                row[f"x_{ref}"] = report.ratio_over(reps, label, ref)
            row.update(apriori_over_measured=median_spread(_apriori(r) for r in mine),
                       predicted_over_measured=full.get("predicted_over_measured"),
                       time_to_target_s=full.get("time_to_target_s"))
            out.append(row)
    return out


def _fixed(value) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _over_baseline(all_rows: list[dict]) -> None:
    base = {(r["model"], r["algorithm"]): r["iteration_backwards"] for r in all_rows if r["setting"] == BASELINE}
    for r in all_rows:
        b = base.get((r["model"], r["algorithm"]))
        r[f"x_{BASELINE}"] = None if b is None else r["iteration_backwards"][0] / b[0]


def write(folder: str, out: str | None = None, *, title: str | None = None, made_by: str | None = None,
          mix: bool = False) -> list[str]:
    """Each setting's report, then ``out``/README.md (default: ``folder``'s) and study.csv."""
    root = Path(folder)
    out = Path(out or folder)
    subs = folders(root)
    if not subs:
        raise SystemExit(f"report: no benchmark folders (<name>/runs/bench.json) under {folder}")
    mixed = records.check_provenance([r for sub in subs for r in records.bench(sub / "runs").records()], mix,
                                     f"report {folder}")
    all_rows = [row for sub in subs for row in rows(sub, mix)]
    baseline = any(s.name == BASELINE for s in subs)
    if baseline:
        _over_baseline(all_rows)
    key = [[r["setting"], r["model"], r["algorithm"]] for r in all_rows]
    card = table(["setting", "model", "algorithm", "iteration s", "x DreamDDP", "x FLSGD", "wire MiB/it"]
                 + ([f"x {BASELINE}"] if baseline else []),
                 [k + [fmt_spread(r["iteration_s"]), fmt_spread(r["x_dreamddp"], 2), fmt_spread(r["x_flsgd"], 2),
                       fmt_spread(r["wire_mib"], 3)] + ([_fixed(r[f"x_{BASELINE}"])] if baseline else [])
                  for k, r in zip(key, all_rows)])
    details = table(["setting", "model", "algorithm", "reps", "a-priori / measured", "same-job / measured",
                     "time to target s"],
                    [k + [str(r["reps"]), fmt_spread(r["apriori_over_measured"], 2),
                          fmt_spread(r["predicted_over_measured"], 2), fmt_spread(r["time_to_target_s"], 1)]
                     for k, r in zip(key, all_rows)])
    readme = write_readme(out, "sweep.md.j2", title=title or f"{root.name}: one study over {len(subs)} settings",
                          mixed=mixed, made_by=made_by or f"dreamddp-bench report {folder}",
                          settings=[s.name for s in subs], baseline=BASELINE if baseline else None,
                          card=card, details=details)
    write_csv(out / "study.csv", [{k: (v[0] if isinstance(v, tuple) else v) for k, v in r.items()} for r in all_rows])
    return [readme, str(out / "study.csv")]
