"""DreamDDP's scheduler against the exact optimum (paper Figs. 15 and 16).

    python runners/scheduler_vs_optimum.py [--profile DIR] [--H 5] [--out results/scheduler]

By number of units: the profile cut to its first 10..30 units (forward order).
By bandwidth: comm times scaled to 1/8..8x the profile's bandwidth.  Writes
by_units.csv, by_bandwidth.csv and scheduler_vs_optimum.png under --out.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from dreamddp.atomic import write_csv  # noqa: E402
from dreamddp.schedule.compare import by_bandwidth, by_units, reference_root  # noqa: E402
from dreamddp.schedule.profile import load_profile  # noqa: E402


def _plot(path: Path, units: list[dict], bw: list[dict], title: str) -> None:
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--profile", help="profile dir (default: paper-v1 A6000 ResNet-18)")
    p.add_argument("--H", type=int, default=5)
    p.add_argument("--min-units", type=int, default=10)
    p.add_argument("--max-units", type=int, default=30)
    p.add_argument("--out", default="results/scheduler")
    args = p.parse_args(argv)
    try:
        d = Path(args.profile) if args.profile else reference_root() / "paper-v1/A6000/resnet18"
        profile = load_profile(d)
        n_max = min(args.max_units, len(profile.units))
        units = by_units(profile, range(args.min_units, n_max + 1), args.H)
        bw = by_bandwidth(profile, (0.125, 0.25, 0.5, 1, 2, 4, 8), args.H)
    except (FileNotFoundError, ValueError) as e:
        print(f"scheduler_vs_optimum: error: {e}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "by_units.csv", units)
    write_csv(out / "by_bandwidth.csv", bw)
    label = d.relative_to(reference_root()) if d.is_relative_to(reference_root()) else d
    _plot(out / "scheduler_vs_optimum.png", units, bw, f"{label}, H={args.H}")
    gaps = [r["wait_dreamddp"] - r["wait_optimal"] for r in units + bw]
    print(f"{len(gaps)} instances, DFS == optimum in {sum(g <= 1e-12 for g in gaps)}, worst gap {max(gaps):.3g} s")
    print(f"wrote {out}/by_units.csv, by_bandwidth.csv, scheduler_vs_optimum.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
