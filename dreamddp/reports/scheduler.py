"""Scheduler vs optimum on the profiles DreamDDP measured in our own runs.

Every DreamDDP run profiles per-unit backward and all-reduce times before it
trains; the compact record keeps that profile.  Here each profile (one per
model and scale, from the scheduler study when it has runs, else from any
DreamDDP run) goes through the same study as ``reference_study`` on the authors'
profiles (dreamddp.schedule.compare.by_units/by_bandwidth):
the DFS scheduler's exposed wait per window against the exact optimum and
PLSGD-ENP, cutting the profile to fewer units and scaling the link.
Writes ``<out>/scheduler/measured/<model>_<scale>/`` (profile/, by_units.csv,
by_bandwidth.csv) and ``<out>/figures/scheduler_measured[_<scale>].png``.

``reference_study`` is the same study on one of the authors' profiles (paper Figs. 15 and
16; ``dreamddp-results scheduler-reference``): by number of units, the profile cut to its
first units (forward order); by bandwidth, comm times scaled to 1/8..8x the profile's.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from dreamddp.atomic import write_csv  # noqa: E402
from dreamddp.schedule.compare import by_bandwidth, by_units, reference_root  # noqa: E402
from dreamddp.reports.records import Record, typed  # noqa: E402
from dreamddp.schedule.profile import load_profile  # noqa: E402

RATIOS = (0.125, 0.25, 0.5, 1, 2, 4, 8)  # the runner's bandwidth ratios


def pick_profiles(runs: list) -> dict[tuple, Record]:
    """(scale, model) -> the run whose profile represents it (scheduler study first)."""
    chosen: dict[tuple, Record] = {}
    # DreamDDP's profiles: the ones its scheduler planned from (other runs profile only to
    # predict, and on a paced link time no all-reduce)
    with_profile = [r for r in map(typed, runs) if r.extra.get("profile_data") and r.algo == "dreamddp"]
    for r in sorted(with_profile, key=lambda r: (r.study != "scheduler", r.name)):
        chosen.setdefault((r.scale, r.model.replace("/", "_")), r)
    return chosen


def _write_profile(data: dict, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in data.items():
        (folder / f"{name}.json").write_text(json.dumps(content, indent=1) + "\n")
    return folder


def study(run: Record, folder: Path) -> tuple[list[dict], list[dict], int]:
    """Run the two studies on ``run``'s profile; CSVs under ``folder``; (by units, by bandwidth, H)."""
    profile = load_profile(_write_profile(run.extra.get("profile_data"), folder / "profile"))
    H = run.H
    n = len(profile.units)
    if n < H:
        raise ValueError(f"{run.name}: {n} units < H={H}; the scheduler needs a unit per iteration")
    # the searches' own seconds left out: the CSVs are remade from the records, byte for byte
    untimed = lambda rows: [{k: v for k, v in r.items() if not k.startswith("time_")} for r in rows]  # noqa: E731
    units = untimed(by_units(profile, range(H, min(n, 30) + 1), H))
    bw = untimed(by_bandwidth(profile, RATIOS, H))
    write_csv(folder / "by_units.csv", units)
    write_csv(folder / "by_bandwidth.csv", bw)
    return units, bw, H


def make_scheduler_figures(runs: list[dict], out_dir: Path) -> list[Path]:
    picked = pick_profiles(runs)
    by_scale: dict[str, list[tuple[str, dict]]] = defaultdict(list)
    for (scale, model), run in sorted(picked.items()):
        by_scale[scale].append((model, run))
    written = []
    for scale, items in by_scale.items():
        fig, axes = plt.subplots(2, len(items), figsize=(max(7.0, 4.8 * len(items)), 7.5), squeeze=False)
        for col, (model, run) in enumerate(items):
            folder = out_dir / "scheduler" / "measured" / (f"{model}_{scale}" if scale else model)
            units, bw, H = study(run, folder)
            written += [folder / "by_units.csv", folder / "by_bandwidth.csv"]
            ax = axes[0][col]
            x = [r["units"] for r in units]
            ax.plot(x, [r["wait_optimal"] for r in units], "k-", lw=3, alpha=0.35, label="exact optimum")
            ax.plot(x, [r["wait_dreamddp"] for r in units], "o-", ms=4, label="DreamDDP DFS")
            ax.plot(x, [r["wait_enp"] for r in units], "s--", ms=4, label="PLSGD-ENP")
            ax.set(title=f"{model} (measured), H={H}", xlabel="units (profile cut)", ylabel="exposed wait per window (s)")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.legend(fontsize=8)
            ax = axes[1][col]
            xb = [r["bandwidth_ratio"] for r in bw]
            ax.plot(xb, [r["wait_optimal"] for r in bw], "k-", lw=3, alpha=0.35, label="exact optimum")
            ax.plot(xb, [r["wait_dreamddp"] for r in bw], "o-", ms=4, label="DreamDDP DFS")
            ax.plot(xb, [r["wait_enp"] for r in bw], "s--", ms=4, label="PLSGD-ENP")
            ax.set_xscale("log")
            ax.set_yscale("symlog", linthresh=1e-3)  # a fully hidden window waits 0 s
            ax.set_ylim(bottom=0)
            ax.set_xticks(xb, [f"{r:g}" for r in xb])
            ax.minorticks_off()
            ax.set(xlabel="bandwidth / profiled bandwidth", ylabel="exposed wait per window (s)")
            ax.legend(fontsize=8)
        fig.suptitle("Scheduler vs exact optimum, profiles measured here")
        fig.tight_layout()
        path = out_dir / "figures" / (f"scheduler_measured_{scale}.png" if scale else "scheduler_measured.png")
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def _plot_reference(path: Path, units: list[dict], bw: list[dict], title: str) -> None:
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    x = [r["units"] for r in units]
    ax = axes[0]
    ax.plot(x, [r["wait_optimal"] for r in units], "k-", lw=3, alpha=0.35, label="exact optimum")
    ax.plot(x, [r["wait_dreamddp"] for r in units], "o-", ms=4, label="DreamDDP DFS")
    ax.plot(x, [r["wait_enp"] for r in units], "s--", ms=4, label="PLSGD-ENP")
    ax.set(xlabel="units (profile cut)", ylabel="exposed wait per window (s)", title="by number of units")
    ax.legend()
    ax = axes[1]
    ax.semilogy(x, [r["time_dreamddp_s"] * 1e3 for r in units], "o-", ms=4, label="DFS search time")
    ax.semilogy(x, [r["time_optimal_s"] * 1e3 for r in units], "k^-", ms=4, label="exact DP time")
    ax.semilogy(x, [r["contiguous_partitions"] for r in units], ":", label="partitions brute force visits (count)")
    ax.set(xlabel="units (profile cut)", ylabel="ms  /  count", title="search cost")
    ax.legend(fontsize=8)
    ax = axes[2]
    xb = [r["bandwidth_ratio"] for r in bw]
    ax.loglog(xb, [r["wait_optimal"] for r in bw], "k-", lw=3, alpha=0.35, label="exact optimum")
    ax.loglog(xb, [r["wait_dreamddp"] for r in bw], "o-", ms=4, label="DreamDDP DFS")
    ax.loglog(xb, [r["wait_enp"] for r in bw], "s--", ms=4, label="PLSGD-ENP")
    ax.set_xticks(xb, [f"{r:g}" for r in xb])
    ax.minorticks_off()
    ax.set(xlabel="bandwidth / profiled bandwidth", ylabel="exposed wait per window (s)", title="by bandwidth (all units)")
    ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


REFERENCE_PROFILE = "paper-v1/A6000/resnet18"


def reference_study(out: Path, profile_dir: Path | None = None, H: int = 5, min_units: int = 10,
                    max_units: int = 30) -> list[Path]:
    """The study on an authors' profile (default: the A6000 ResNet-18 one): by_units.csv,
    by_bandwidth.csv and scheduler_vs_optimum.png under ``out``."""
    d = profile_dir or reference_root() / REFERENCE_PROFILE
    profile = load_profile(d)
    units = by_units(profile, range(min_units, min(max_units, len(profile.units)) + 1), H)
    bw = by_bandwidth(profile, RATIOS, H)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "by_units.csv", units)
    write_csv(out / "by_bandwidth.csv", bw)
    label = d.relative_to(reference_root()) if profile_dir is None else d
    _plot_reference(out / "scheduler_vs_optimum.png", units, bw, f"{label}, H={H}")
    return [out / "by_units.csv", out / "by_bandwidth.csv", out / "scheduler_vs_optimum.png"]
