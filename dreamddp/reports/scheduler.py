"""Scheduler vs optimum: the DFS scheduler's exposed wait per window against the exact optimum and
PLSGD-ENP (dreamddp.schedule.compare), the profile cut to fewer units and the link scaled.

``make_scheduler_figures``: on the profiles DreamDDP measured in our runs (one per model and scale,
the scheduler study's first), into ``<out>/scheduler/measured/`` and ``<out>/figures/``;
``reference_study``: on one of the authors' profiles (paper Figs. 15 and 16).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from matplotlib.ticker import MaxNLocator

from dreamddp.atomic import write_csv
from dreamddp.reports.figures import plt, save  # figures sets matplotlib's Agg backend
from dreamddp.reports.records import Record, typed
from dreamddp.schedule.compare import by_bandwidth, by_units, reference_root
from dreamddp.schedule.profile import load_profile

RATIOS = (0.125, 0.25, 0.5, 1, 2, 4, 8)  # the runner's bandwidth ratios
REFERENCE_PROFILE = "paper-v1/A6000/resnet18"
WAIT = "exposed wait per window (s)"
BANDWIDTH = "bandwidth / profiled bandwidth"


def pick_profiles(runs: list) -> dict[tuple, Record]:
    """(scale, model) -> the run whose profile represents it: DreamDDP's, which its scheduler
    planned from (others profile only to predict), the scheduler study's first."""
    chosen: dict[tuple, Record] = {}
    with_profile = [r for r in map(typed, runs) if r.profile_data and r.algo == "dreamddp"]
    for r in sorted(with_profile, key=lambda r: (r.study != "scheduler", r.name)):
        chosen.setdefault((r.scale, r.model.replace("/", "_")), r)
    return chosen


def study(run: Record, folder: Path) -> tuple[list[dict], list[dict], int]:
    """The two studies on ``run``'s profile, CSVs under ``folder``: (by units, by bandwidth, H)."""
    (folder / "profile").mkdir(parents=True, exist_ok=True)
    for name, content in run.profile_data.items():
        (folder / "profile" / f"{name}.json").write_text(json.dumps(content, indent=1) + "\n")
    profile, H = load_profile(folder / "profile"), run.H
    n = len(profile.units)
    if n < H:
        raise ValueError(f"{run.name}: {n} units < H={H}; the scheduler needs a unit per iteration")
    units, bw = by_units(profile, range(H, min(n, 30) + 1), H), by_bandwidth(profile, RATIOS, H)
    # the searches' own seconds left out: the CSVs are remade from the records, byte for byte
    units, bw = ([{k: v for k, v in r.items() if not k.startswith("time_")} for r in rows] for rows in (units, bw))
    write_csv(folder / "by_units.csv", units)
    write_csv(folder / "by_bandwidth.csv", bw)
    return units, bw, H


def _waits(plot, x: list, rows: list[dict]) -> None:
    plot(x, [r["wait_optimal"] for r in rows], "k-", lw=3, alpha=0.35, label="exact optimum")
    plot(x, [r["wait_dreamddp"] for r in rows], "o-", ms=4, label="DreamDDP DFS")
    plot(x, [r["wait_enp"] for r in rows], "s--", ms=4, label="PLSGD-ENP")


def make_scheduler_figures(runs: list[dict], out_dir: Path) -> list[Path]:
    by_scale: dict[str, list[tuple[str, dict]]] = defaultdict(list)
    for (scale, model), run in sorted(pick_profiles(runs).items()):
        by_scale[scale].append((model, run))
    written = []
    for scale, items in by_scale.items():
        fig, axes = plt.subplots(2, len(items), figsize=(max(7.0, 4.8 * len(items)), 7.5), squeeze=False)
        for col, (model, run) in enumerate(items):
            folder = out_dir / "scheduler" / "measured" / (f"{model}_{scale}" if scale else model)
            units, bw, H = study(run, folder)
            written += [folder / "by_units.csv", folder / "by_bandwidth.csv"]
            ax = axes[0][col]
            _waits(ax.plot, [r["units"] for r in units], units)
            ax.set(title=f"{model} (measured), H={H}", xlabel="units (profile cut)", ylabel=WAIT)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.legend(fontsize=8)
            ax = axes[1][col]
            xb = [r["bandwidth_ratio"] for r in bw]
            _waits(ax.plot, xb, bw)
            ax.set_xscale("log")
            ax.set_yscale("symlog", linthresh=1e-3)  # a fully hidden window waits 0 s
            ax.set_ylim(bottom=0)
            ax.set_xticks(xb, [f"{r:g}" for r in xb])
            ax.minorticks_off()
            ax.set(xlabel=BANDWIDTH, ylabel=WAIT)
            ax.legend(fontsize=8)
        name = f"scheduler_measured_{scale}.png" if scale else "scheduler_measured.png"
        written.append(save(fig, out_dir / "figures" / name, "Scheduler vs exact optimum, profiles measured here"))
    return written


def reference_study(out: Path, profile_dir: Path | None = None, H: int = 5, min_units: int = 10,
                    max_units: int = 30) -> list[Path]:
    """The study on an authors' profile (default: A6000 ResNet-18): its CSVs and scheduler_vs_optimum.png."""
    d = profile_dir or reference_root() / REFERENCE_PROFILE
    profile = load_profile(d)
    units = by_units(profile, range(min_units, min(max_units, len(profile.units)) + 1), H)
    bw = by_bandwidth(profile, RATIOS, H)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "by_units.csv", units)
    write_csv(out / "by_bandwidth.csv", bw)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    x = [r["units"] for r in units]
    _waits(axes[0].plot, x, units)
    axes[0].set(xlabel="units (profile cut)", ylabel=WAIT, title="by number of units")
    axes[0].legend()
    ax = axes[1]
    ax.semilogy(x, [r["time_dreamddp_s"] * 1e3 for r in units], "o-", ms=4, label="DFS search time")
    ax.semilogy(x, [r["time_optimal_s"] * 1e3 for r in units], "k^-", ms=4, label="exact DP time")
    ax.semilogy(x, [r["contiguous_partitions"] for r in units], ":", label="partitions brute force visits (count)")
    ax.set(xlabel="units (profile cut)", ylabel="ms  /  count", title="search cost")
    ax.legend(fontsize=8)
    xb = [r["bandwidth_ratio"] for r in bw]
    _waits(axes[2].loglog, xb, bw)
    axes[2].set_xticks(xb, [f"{r:g}" for r in xb])
    axes[2].minorticks_off()
    axes[2].set(xlabel=BANDWIDTH, ylabel=WAIT, title="by bandwidth (all units)")
    axes[2].legend()
    label = d.relative_to(reference_root()) if profile_dir is None else d
    save(fig, out / "scheduler_vs_optimum.png", f"{label}, H={H}", dpi=120)
    return [out / "by_units.csv", out / "by_bandwidth.csv", out / "scheduler_vs_optimum.png"]
