"""``<dir>/README.md`` over a study's benchmark folders (``<dir>/<ms>ms``, ``<dir>/ratio<r>``,
``<dir>/<setting>``): one row per folder, model and algorithm, so a setting's effect reads down a
column.  Where a folder is named ``BASELINE``, each row's time is also taken over the same
algorithm's there, each first in units of its job's calibrated backward (the host drifts between jobs).
"""

from __future__ import annotations

from pathlib import Path

from dreamddp.atomic import write_csv
from dreamddp.reports import bench as report
from dreamddp.reports import records, versions
from dreamddp.reports.labels import TIMED
from dreamddp.reports.render import spread_table, write_readme
from dreamddp.reports.spread import median_spread, medians

BASELINE = "equal"


def folders(out: Path) -> list[Path]:
    """The benchmark folders directly under ``out``, in name order (numbers by value)."""
    found = [p for p in out.iterdir() if (p / "runs" / "bench.json").is_file()]
    return sorted(found, key=lambda p: (float("".join(c for c in p.name if c.isdigit() or c == ".") or "inf"), p.name))


def rows(folder: Path, mix: bool = False) -> list[dict]:
    """The folder's rows; writes its own report on the way (report.write)."""
    data = report.load(str(folder / "runs"))
    made = {(r["model"], r["algorithm"]): r for r in report.write(str(folder / "runs"), str(folder), data, mix=mix)}
    out = []
    for model, reps in data.items():
        for label in records.ordered(lb for s in reps.values() for lb in s if lb in TIMED):
            mine = [s[label] for s in reps.values() if label in s]
            full = made.get((model, label), {})
            out.append({"setting": folder.name, "model": model, "algorithm": label, "reps": len(mine),
                        "iteration_s": median_spread(r.mean_iteration for r in mine),
                        # in units of its job's calibrated full-speed backward: the host drifts between jobs
                        "iteration_backwards": median_spread(r.mean_iteration / r.calibration()["backward_s"]
                                                             for r in mine),
                        "wire_mib": median_spread(r.wire_per_iteration() / 2**20 for r in mine),
                        "param_mib": median_spread(r.param_bytes / 2**20 for r in mine if r.param_bytes),
                        **{f"x_{ref}": report.ratio_over(reps, label, ref) for ref in report.REFERENCES},
                        "apriori_over_measured": median_spread(r.predicted_mean / r.mean_iteration for r in mine
                                                               if r.predicted_mean),
                        "predicted_over_measured": full.get("predicted_over_measured"),
                        "time_to_target_s": full.get("time_to_target_s")})
    return out


def write(folder: str, out: str | None = None, *, title: str | None = None, made_by: str | None = None,
          mix: bool = False) -> list[str]:
    """Each setting's report, then ``out``/README.md (default: ``folder``'s) and study.csv."""
    root = Path(folder)
    out = Path(out or folder)
    subs = folders(root)
    if not subs:
        raise SystemExit(f"report: no benchmark folders (<name>/runs/bench.json) under {folder}")
    mixed, code = versions.check_provenance([r for sub in subs for r in records.bench(sub / "runs").records()], mix,
                                     f"report {folder}")
    all_rows = [row for sub in subs for row in rows(sub, mix)]
    baseline = BASELINE if any(s.name == BASELINE for s in subs) else None
    if baseline:
        base = {(r["model"], r["algorithm"]): r["iteration_backwards"] for r in all_rows if r["setting"] == BASELINE}
        for r in all_rows:
            b = base.get((r["model"], r["algorithm"]))
            r[f"x_{BASELINE}"] = None if b is None else r["iteration_backwards"][0] / b[0]
    param = len({r["param_mib"][0] for r in all_rows if r["param_mib"]}) > 1
    key = [("setting", "setting", None), ("model", "model", None), ("algorithm", "algorithm", None)]
    card = spread_table(all_rows, key + [("iteration s", "iteration_s", 3), ("x DreamDDP", "x_dreamddp", 2),
                                         ("x FLSGD", "x_flsgd", 2), ("wire MiB/it", "wire_mib", 3)]
                        + ([(f"x {BASELINE}", f"x_{BASELINE}", 2)] if baseline else [])
                        # each rank's parameters (its local shards on a mesh), where the settings differ in them
                        + ([("param MiB/rank", "param_mib", 3)] if param else []))
    details = spread_table(all_rows, key + [("reps", "reps", None), ("a-priori / measured", "apriori_over_measured", 2),
                                            ("same-job / measured", "predicted_over_measured", 2),
                                            ("time to target s", "time_to_target_s", 1)])
    readme = write_readme(out, "sweep.md.j2", title=title, name=root.name,
                          mixed=mixed, code=code, made_by=made_by or f"dreamddp-bench report {folder}",
                          settings=[s.name for s in subs], baseline=baseline, card=card, details=details,
                          param=param)
    write_csv(out / "study.csv", medians(all_rows))
    return [readme, str(out / "study.csv")]
