"""The speedup table: mean iteration time, exposed wait, time to target, DreamDDP's speedups.

Runs are compared within a group (study and scale, model, data, workers, link).  The target per
group is ``target`` if given, else the group's worst final value, so every run reaches it and the
slowest sets the pace.  Speedups are ``baseline / dreamddp``, against the DreamDDP run with the same
H, else the group's only one.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Iterable, Optional

from dreamddp.atomic import write_csv as atomic_csv
from dreamddp.atomic import write_text
from dreamddp.reports.records import order, typed
from dreamddp.reports.render import render, table
from dreamddp.reports.target import eval_points, time_to_target

PROFILE_ONLY = ("scheduler",)  # studies whose runs only profile (two steps): no table
REFERENCE = "dreamddp"  # the method whose speedups the tables report (the paper's)
HIGHER_IS_BETTER = {"accuracy": True, "loss": False, "perplexity": False}
COLUMNS = (
    "study", "scale", "model", "data", "workers", "link", "algorithm", "H", "iterations",
    "mean_iteration_time_s", "mean_wait_s", "wire_mib_per_iteration", "final_eval", "metric", "target",
    "time_to_target_s", "speedup_iteration", "speedup_time_to_target",
)


def link_label(run) -> str:
    """``ratio 7`` (comm/backward set at start-up), ``1 Gbit/s``, ``ideal``; `` tc`` when shaped."""
    run = typed(run)
    backend, ratio, gbps = run.bandwidth_backend, run.comm_ratio, run.bandwidth_gbps
    if backend == "ideal":
        return "ideal"
    return (f"ratio {ratio:g}" if ratio else f"{gbps:g} Gbit/s") + (" tc" if backend == "tc" else "")


def algo_order(label: str) -> int:
    """Display order (the algorithms' own metadata); variants sort with their algorithm."""
    return order(label)[0]


def _sort_key(row: dict) -> tuple:
    return (algo_order(row["algorithm"]), row["algorithm"], row["H"] or 0)


def by_study(runs: Iterable[dict], skip: tuple[str, ...] = PROFILE_ONLY) -> list[tuple[str, list]]:
    """(``<study>[_<scale>]``, its runs) of every study but ``skip``'s, sorted by (study, scale)."""
    studies: dict[tuple, list] = defaultdict(list)
    for run in map(typed, runs):
        if run.study not in skip:
            studies[(run.study, run.scale)].append(run)
    return [(f"{study}_{scale}" if scale else study, members) for (study, scale), members in sorted(studies.items())]


def speedup_rows(runs: Iterable[dict], metric: str = "loss", targets: Optional[dict] = None) -> list[dict]:
    """One row per run, grouped and ordered; ``targets`` maps model (``gpt2/tiny``) or ``*`` to a value."""
    if metric not in HIGHER_IS_BETTER:
        raise ValueError(f"metric {metric!r}: choose from {', '.join(HIGHER_IS_BETTER)}")
    targets = targets or {}
    groups: dict[tuple, list] = defaultdict(list)
    for run in map(typed, runs):
        groups[(run.study, run.scale, run.model, run.data, run.world, link_label(run))].append(run)
    rows: list[dict] = []
    for key in sorted(groups, key=lambda k: tuple(str(x) for x in k)):
        members = groups[key]
        finals = [f for f in (r.final_eval(metric) for r in members) if f is not None]
        target = targets.get(key[2], targets.get("*"))
        if target is None and finals:
            target = min(finals) if HIGHER_IS_BETTER[metric] else max(finals)
        block = [dict(zip(COLUMNS[:6], key), algorithm=run.variant, H=run.H, iterations=run.n_iterations,
                      mean_iteration_time_s=run.mean_iteration,
                      mean_wait_s=run.mean_wait, wire_mib_per_iteration=run.wire_per_iteration() / 2**20,
                      final_eval=run.final_eval(metric), metric=metric, target=target,
                      time_to_target_s=(time_to_target(eval_points(run, metric), target, HIGHER_IS_BETTER[metric])
                                        if target is not None else None))
                 for run in members]
        dream = [r for r in block if r["algorithm"] == REFERENCE]
        for row in block:
            same_h = [d for d in dream if d["H"] == row["H"]]
            ref = same_h[0] if same_h else (dream[0] if len(dream) == 1 else None)
            for speedup, field in (("speedup_iteration", "mean_iteration_time_s"),
                                   ("speedup_time_to_target", "time_to_target_s")):
                num, den = row[field], ref and ref[field]
                row[speedup] = num / den if num is not None and den not in (None, 0) else None
        rows += sorted(block, key=_sort_key)
    return rows


def write_csv(rows: list[dict], path: Path) -> None:
    """Atomically (dreamddp.atomic): a killed writer leaves the previous table whole."""
    atomic_csv(path, rows, list(COLUMNS))


def _fmt(value, spec: str = ".4g") -> str:
    return "" if value is None else (format(value, spec) if isinstance(value, float) else str(value))


def markdown(rows: list[dict], title: str) -> str:
    """The card (a row per group and algorithm, at most 8 columns, empty ones left out), then each group in detail."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["model"], r["data"], r["workers"], r["link"])].append(r)
    metric = rows[0]["metric"] if rows else "loss"
    card = table(["setting", "algorithm", "iteration s", "x DreamDDP", "exposed wait s", "wire MiB/it",
                  f"final eval {metric}", "time to target s"],
                 [[f"{r['model']} on {r['data']}, {r['workers']} workers, {r['link']}",
                   r["algorithm"] + (f" H={r['H']}" if r["H"] is not None else ""), _fmt(r["mean_iteration_time_s"]),
                   _fmt(r["speedup_iteration"], ".2f"), _fmt(r["mean_wait_s"]), _fmt(r["wire_mib_per_iteration"], ".3f"),
                   _fmt(r["final_eval"]), _fmt(r["time_to_target_s"])] for r in rows])
    return render("tables.md.j2", title=title, card=card, groups=groups, fmt=_fmt)


def write_tables(runs: list[dict], out_dir: Path, metric: str = "loss", targets: Optional[dict] = None) -> list[Path]:
    """``<out>/tables/<study>[_<scale>].csv|.md`` per study; returns the files written."""
    written = []
    for stem, members in by_study(runs):
        rows = speedup_rows(members, metric, targets)
        csv_path, md_path = out_dir / "tables" / f"{stem}.csv", out_dir / "tables" / f"{stem}.md"
        write_csv(rows, csv_path)
        write_text(md_path, markdown(rows, f"{stem}: mean iteration time, exposed wait, time to target"))
        written += [csv_path, md_path]
    return written
