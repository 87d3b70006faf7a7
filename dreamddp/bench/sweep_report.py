"""``<dir>/README.md`` over several benchmark folders of one study (``make bench-latency``'s
``<dir>/<ms>ms``, ``make bench-methods``' ``<dir>/ratio<r>``): one row per folder, model and
algorithm, so a setting's effect reads down a column.

Per row, medians over repetitions with the min-max spread: the mean iteration time, bytes per
iteration, and the ratios over DreamDDP and over FLSGD, each taken inside one repetition before
its median.  Each folder's own full report is ``<dir>/<folder>/README.md`` (report.py).
"""

from __future__ import annotations

from pathlib import Path

from dreamddp.atomic import write_csv, write_text
from dreamddp.bench import report
from dreamddp.bench.predict import mean_iteration
from dreamddp.bench.segments import TIMED
from dreamddp.results.spread import fmt_spread, median_spread



def folders(out: Path) -> list[Path]:
    """The benchmark folders directly under ``out``, in name order (numbers by value)."""
    found = [p for p in out.iterdir() if (p / "runs" / "bench.json").is_file()]
    key = lambda p: (float("".join(c for c in p.name if c.isdigit() or c == ".") or "inf"), p.name)  # noqa: E731
    return sorted(found, key=key)


def rows(folder: Path) -> list[dict]:
    out = []
    for model, reps in report.load(str(folder / "runs")).items():
        for label in TIMED:
            mine = [s[label] for s in reps.values() if label in s]
            if not mine:
                continue
            row = {"setting": folder.name, "model": model, "algorithm": label, "reps": len(mine),
                   "iteration_s": median_spread(mean_iteration(r) for r in mine),
                   "mib_per_iteration": median_spread(r["summary"]["bytes_per_iteration"] / 2**20 for r in mine)}
            for ref in report.REFERENCES:
                row[f"x_{ref}"] = report.ratio_over(reps, label, ref)
            out.append(row)
    return out


def write(out: str) -> str:
    root = Path(out)
    subs = folders(root)
    if not subs:
        raise SystemExit(f"report: no benchmark folders (<name>/runs/bench.json) under {out}")
    all_rows = []
    for sub in subs:
        report.write(str(sub / "runs"), str(sub))
        all_rows += rows(sub)
    lines = [f"# {root.name}: one study over {len(subs)} settings", "",
             f"Made by `dreamddp-bench report {out}` from the run records of "
             + ", ".join(f"[{s.name}]({s.name}/README.md)" for s in subs)
             + " (each made by the command its own README names). Medians over repetitions, min-max in brackets; "
             "a ratio is taken inside one repetition before its median.", "",
             "| setting | model | algorithm | reps | iteration s | MiB / iteration | x DreamDDP | x FLSGD |",
             "|---|---|---|---|---|---|---|---|"]
    for r in all_rows:
        lines.append(f"| {r['setting']} | {r['model']} | {r['algorithm']} | {r['reps']} | "
                     f"{fmt_spread(r['iteration_s'])} | {fmt_spread(r['mib_per_iteration'], 3)} | "
                     f"{fmt_spread(r['x_dreamddp'], 2)} | {fmt_spread(r['x_flsgd'], 2)} |")
    write_text(root / "README.md", "\n".join(lines) + "\n")
    write_csv(root / "study.csv", [{k: (v[0] if isinstance(v, tuple) else v) for k, v in r.items()}
                                   for r in all_rows])
    return str(root / "README.md")
