"""Iteration-time table of every algorithm for a profile, optionally projected.

    python runners/iteration_time_table.py PROFILE_DIR [--H 10]
        [--workers 32 ...] [--gbps 0.01 0.1 1 10 ...] [--base-workers N --base-gbps G]
        [--model simulator|authors|both] [--out results/iteration_time]

Without --workers/--gbps the profile's measured comm times are used.  With
them, comm times are projected from the profile's own (world, bandwidth) (read
from the artifact path, meta.json, or --base-*) by the ring factor 2(n-1)/n and
the bandwidth ratio; see ``dreamddp.schedule.compare.project``.  Prints a
Markdown table and writes iteration_times.csv and iteration_times.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dreamddp.atomic import write_csv
from dreamddp.prediction import iteration_time_table
from dreamddp.schedule.compare import project
from dreamddp.schedule.profile import load_profile


def _markdown(rows: list[dict]) -> str:
    algos = list(dict.fromkeys(r["algorithm"] for r in rows))
    keys = list(dict.fromkeys((r["model"], r["workers"], r["gbps"]) for r in rows))
    t = {(r["model"], r["workers"], r["gbps"], r["algorithm"]): r["iteration_s"] for r in rows}
    lines = ["| model | workers | Gbit/s | " + " | ".join(algos) + " |", "|---" * (3 + len(algos)) + "|"]
    for m, w, g in keys:
        cells = [f"{t[(m, w, g, a)]:.4f}" if (m, w, g, a) in t else "" for a in algos]
        lines.append(f"| {m} | {w} | {g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("profile_dir")
    p.add_argument("--H", type=int, default=10)
    p.add_argument("--workers", type=int, nargs="*", default=[])
    p.add_argument("--gbps", type=float, nargs="*", default=[])
    p.add_argument("--base-workers", type=int)
    p.add_argument("--base-gbps", type=float)
    p.add_argument("--model", choices=("simulator", "authors", "both"), default="both")
    p.add_argument("--out", default="results/iteration_time")
    args = p.parse_args(argv)
    try:
        if args.H < 1:
            raise ValueError(f"--H must be >= 1, got {args.H}")
        profile = load_profile(args.profile_dir)
        models = ("simulator", "authors") if args.model == "both" else (args.model,)
        if args.workers or args.gbps:
            workers = args.workers or [args.base_workers or profile.meta.get("world")]
            gbps = args.gbps or [args.base_gbps or profile.meta.get("gbps")]
            cases = [(w, g, project(profile, w, g, args.base_workers, args.base_gbps)) for w in workers for g in gbps]
        else:
            cases = [(profile.meta.get("world", "as profiled"), profile.meta.get("gbps", "as profiled"), profile)]
        rows = []
        for w, g, prof in cases:
            for m in models:
                for r in iteration_time_table(prof, args.H, m):
                    rows.append({"model": m, "workers": w, "gbps": g, **r})
    except (FileNotFoundError, ValueError, TypeError) as e:
        print(f"iteration_time_table: error: {e}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "iteration_times.csv", rows)
    md = _markdown(rows)
    (out / "iteration_times.md").write_text(f"Mean iteration time (s), H={args.H}, profile {args.profile_dir}\n\n{md}\n")
    print(md)
    print(f"wrote {out}/iteration_times.csv, iteration_times.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
