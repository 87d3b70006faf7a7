"""The speedup table: mean iteration time, exposed wait, time to target, DreamDDP's speedups.

Runs are compared within a group: same study and scale, model, data, worker
count and link.  Per run: mean iteration time and exposed wait (the run's
summary: warm-up iterations excluded, dreamddp/run/summary.py), wire bytes per
worker per iteration (records.py), final evaluation, and the time to target (results/target.py) of
the evaluation series.

Target (per group): ``target`` if given, else the worst final value among the
group's runs (the highest final eval loss, or the lowest final accuracy), so
every run of the group reaches it and the slowest to get there sets the pace.
Speedups are ``baseline / dreamddp`` for iteration time and time to target;
the DreamDDP run compared with is the one with the same H, else the group's
only DreamDDP run.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Iterable, Optional

from dreamddp.atomic import write_csv as atomic_csv
from dreamddp.atomic import write_text
from dreamddp.reports.records import order, typed
from dreamddp.reports.target import eval_points, time_to_target

# Studies whose runs only profile (two training steps): their timings make no table.
PROFILE_ONLY = ("scheduler",)
REFERENCE = "dreamddp"  # the method whose speedups the tables report (the paper's)
HIGHER_IS_BETTER = {"accuracy": True, "loss": False, "perplexity": False}
COLUMNS = (
    "study", "scale", "model", "data", "workers", "link", "algorithm", "H", "iterations",
    "mean_iteration_time_s", "mean_wait_s", "wire_mib_per_iteration", "final_eval", "metric", "target",
    "time_to_target_s", "speedup_iteration", "speedup_time_to_target",
)


def link_label(run) -> str:
    """``ratio 7`` (comm/backward set at start-up), ``1 Gbit/s``, ``ideal``; ``+ tc`` when shaped."""
    bw = typed(run).bandwidth
    backend, ratio, gbps = bw.get("backend"), bw.get("comm_ratio"), bw.get("gbps")
    if backend == "ideal":
        return "ideal"
    return (f"ratio {ratio:g}" if ratio else f"{gbps:g} Gbit/s") + (" tc" if backend == "tc" else "")


def workers(run) -> int:
    return typed(run).world


def group_key(run) -> tuple:
    rec = typed(run)
    return rec.study, rec.scale, rec.model, rec.data, rec.world, link_label(rec)


def algo_label(run) -> str:
    """The run's algorithm as tables name it (records.variant: a variant such as ``dreamddp+overlap``)."""
    return typed(run).variant


def algo_order(label: str) -> int:
    """Display order (records.order: the algorithms' own metadata); variants sort with their algorithm."""
    return order(label)[0]


def h_of(run) -> Optional[int]:
    """H for algorithms that sync once per H-window (their display says so), else None."""
    return typed(run).H


def final(run, metric: str) -> Optional[float]:
    return typed(run).final_eval(metric)


def _sort_key(row: dict) -> tuple:
    algo = row["algorithm"]
    return (algo_order(algo), algo, row["H"] or 0)


def speedup_rows(runs: Iterable[dict], metric: str = "loss", targets: Optional[dict] = None) -> list[dict]:
    """One row per run, grouped and ordered; ``targets`` maps model (``gpt2/tiny``) or ``*`` to a value."""
    if metric not in HIGHER_IS_BETTER:
        raise ValueError(f"metric {metric!r}: choose from {', '.join(HIGHER_IS_BETTER)}")
    targets = targets or {}
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for run in map(typed, runs):
        groups[group_key(run)].append(run)
    rows: list[dict] = []
    for key in sorted(groups, key=lambda k: tuple(str(x) for x in k)):
        members = groups[key]
        finals = [f for f in (final(r, metric) for r in members) if f is not None]
        target = targets.get(key[2], targets.get("*"))
        if target is None and finals:
            target = min(finals) if HIGHER_IS_BETTER[metric] else max(finals)
        block = []
        for run in members:
            s = run.summary
            block.append({
                "study": key[0], "scale": key[1], "model": key[2], "data": key[3], "workers": key[4], "link": key[5],
                "algorithm": run.variant, "H": run.H, "iterations": s.get("iterations"),
                "mean_iteration_time_s": s.get("mean_iteration_time"), "mean_wait_s": s.get("mean_wait"),
                "wire_mib_per_iteration": run.wire_per_iteration() / 2**20,
                "final_eval": final(run, metric), "metric": metric, "target": target,
                "time_to_target_s": (time_to_target(eval_points(run, metric), target, HIGHER_IS_BETTER[metric])
                                     if target is not None else None),
            })
        _add_speedups(block)
        rows += sorted(block, key=_sort_key)
    return rows


def _ratio(num, den) -> Optional[float]:
    return num / den if num is not None and den not in (None, 0) else None


def _add_speedups(block: list[dict]) -> None:
    dream = [r for r in block if r["algorithm"] == REFERENCE]
    for row in block:
        same_h = [d for d in dream if d["H"] == row["H"]]
        ref = same_h[0] if same_h else (dream[0] if len(dream) == 1 else None)
        row["speedup_iteration"] = _ratio(row["mean_iteration_time_s"], ref and ref["mean_iteration_time_s"])
        row["speedup_time_to_target"] = _ratio(row["time_to_target_s"], ref and ref["time_to_target_s"])


def write_csv(rows: list[dict], path: Path) -> None:
    """Atomically (dreamddp.atomic): a killed writer leaves the previous table whole."""
    atomic_csv(path, rows, list(COLUMNS))


def _fmt(value, spec: str = ".4g") -> str:
    return "" if value is None else (format(value, spec) if isinstance(value, float) else str(value))


def markdown(rows: list[dict], title: str) -> str:
    """A pivot (mean iteration time per algorithm, one line per group), then each group in detail."""
    lines = [f"# {title}", ""]
    labels = sorted({(r["algorithm"], r["H"]) for r in rows}, key=lambda a: _sort_key({"algorithm": a[0], "H": a[1]}))
    name = {a: a[0] + (f" H={a[1]}" if a[1] is not None else "") for a in labels}
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["model"], r["data"], r["workers"], r["link"])].append(r)
    lines += ["Mean iteration time (s); in brackets: DreamDDP's speedup over it.", ""]
    lines += ["| model | data | workers | link | " + " | ".join(name[a] for a in labels) + " |"]
    lines += ["|---" * (4 + len(labels)) + "|"]
    for (model, data, n, link), members in groups.items():
        by = {(r["algorithm"], r["H"]): r for r in members}
        cells = []
        for a in labels:
            r = by.get(a)
            sp = r and r["speedup_iteration"]
            cells.append("" if r is None else _fmt(r["mean_iteration_time_s"]) + (f" ({sp:.2f}x)" if sp else ""))
        lines.append(f"| {model} | {data} | {n} | {link} | " + " | ".join(cells) + " |")
    for (model, data, n, link), members in groups.items():
        m = members[0]
        lines += ["", f"## {model} on {data}, {n} workers, link {link}: target {m['metric']} {_fmt(m['target'])}", ""]
        lines += ["| algorithm | H | iterations | iteration (s) | exposed wait (s) | wire MiB/iteration | final eval "
                  f"{m['metric']} | time to target (s) | speedup (iteration) | speedup (time to target) |"]
        lines += ["|---" * 10 + "|"]
        for r in members:
            lines.append("| " + " | ".join([
                r["algorithm"], _fmt(r["H"]), _fmt(r["iterations"]), _fmt(r["mean_iteration_time_s"]),
                _fmt(r["mean_wait_s"]), _fmt(r["wire_mib_per_iteration"], ".3f"), _fmt(r["final_eval"]),
                _fmt(r["time_to_target_s"]), _fmt(r["speedup_iteration"], ".2f"),
                _fmt(r["speedup_time_to_target"], ".2f"),
            ]) + " |")
    return "\n".join(lines) + "\n"


def write_tables(runs: list[dict], out_dir: Path, metric: str = "loss", targets: Optional[dict] = None) -> list[Path]:
    """``<out>/tables/<study>[_<scale>].csv|.md`` per study; returns the files written."""
    by_study: dict[tuple, list[dict]] = defaultdict(list)
    for run in map(typed, runs):
        if run.study not in PROFILE_ONLY:
            by_study[(run.study, run.scale)].append(run)
    written = []
    for (study, scale), members in sorted(by_study.items()):
        stem = f"{study}_{scale}" if scale else study
        rows = speedup_rows(members, metric, targets)
        csv_path, md_path = out_dir / "tables" / f"{stem}.csv", out_dir / "tables" / f"{stem}.md"
        write_csv(rows, csv_path)
        write_text(md_path, markdown(rows, f"{stem}: mean iteration time, exposed wait, time to target"))
        written += [csv_path, md_path]
    return written
