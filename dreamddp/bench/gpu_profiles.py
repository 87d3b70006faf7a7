"""Our per-layer GPU profiles next to the DreamDDP authors' H100 profiles, and what each gives.

Part of ``dreamddp-bench gpu --reports``: for each ``<gpu>/<device>/profiles/<model>_<precision>/``
profile, against the authors' profile of the same model on an H100.

Writes ``<out>/profiles_<model>.md`` (and ``.csv``): backward totals, the per-layer
ratio table (our time / the authors' for every unit both profiles hold, in backward
order; the authors' parameter-free layers, which our units absorb, in one line), the
Spearman rank correlation of the per-layer times, and, for every profile at each link
rate, the DreamDDP schedule (our scheduler with bubble filling, and the authors' DFS)
and the modelled iteration times at ``--workers`` GPUs (our simulator and the authors'
formulas).  Every profile's all-reduce times there come from the same bytes (our
model's, per layer name) over a ring at the link rate, so the profiles differ in
compute alone: the authors' measured comm.json is for their own cluster.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from dreamddp.atomic import write_csv, write_text
from dreamddp.comm.cost import collective_time
from dreamddp.prediction import iteration_time_table
from dreamddp.schedule.authors_model import aligned
from dreamddp.schedule.dfs import dreamddp as authors_dfs
from dreamddp.schedule.make import make_schedule
from dreamddp.schedule.profile import Profile, load_profile


def spearman(a: list[float], b: list[float]) -> float:
    """Rank correlation (average ranks for ties)."""
    def ranks(x):
        x = np.asarray(x, dtype=float)
        order = np.argsort(x, kind="mergesort")
        r = np.empty(len(x))
        r[order] = np.arange(len(x), dtype=float)
        for v in np.unique(x):  # ties share their mean rank
            idx = np.flatnonzero(x == v)
            r[idx] = r[idx].mean()
        return r
    ra, rb = ranks(a), ranks(b)
    return float(np.corrcoef(ra, rb)[0, 1])


def unstamped_backward(record: Path) -> float | None:
    """Median backward seconds of the run's loop iterations that stamped no unit (iteration % H != 0)."""
    if not record.is_file():
        return None
    rec = json.loads(record.read_text())
    H = rec["config"]["algo"].get("H") or 1
    rows = [r["backward"] for r in rec["iterations"] if r["iteration"] % H]
    return statistics.median(rows) if rows else None


def on_link(profile: Profile, nbytes: dict[str, int], workers: int, gbps: float) -> Profile:
    """``profile`` with every unit's all-reduce time from its bytes (by name; 0 for a
    parameter-free layer) over a ring of ``workers`` at ``gbps``."""
    comm = {u: collective_time("all_reduce", nbytes.get(u, 0), workers, gbps) for u in profile.units}
    meta = {**profile.meta, "world": workers, "gbps": gbps}
    return replace(profile, comm=comm, nbytes={u: nbytes.get(u, 0) for u in profile.units}, meta=meta)


def per_iteration(schedule: dict[str, list[int]], H: int, nbytes: dict[str, int]) -> str:
    """Units and MiB synced in each iteration of the window: '[n0 .. n9] / [MiB ...]'."""
    counts, mib = [0] * H, [0.0] * H
    for u, its in schedule.items():
        for t in its:
            counts[t] += 1
            mib[t] += nbytes.get(u, 0) / 2**20
    return "units " + " ".join(map(str, counts)) + "; MiB " + " ".join(f"{m:.0f}" for m in mib)


def compare(model: str, ours: dict[str, Profile], authors: Profile, H: int, workers: int, gbps: list[float]):
    first = next(iter(ours.values()))
    nbytes = first.nbytes
    common = [u for u in first.units if u in authors.bp]
    param_free = [u for u in authors.units if u not in first.bp]
    lines = [f"# {model}: our GPU profiles next to the authors' H100 profile", ""]
    lines += ["| profile | units | backward ms | forward ms | step ms | backward / authors' | backward ms, loop iterations "
              "without stamps |", "|---|---|---|---|---|---|---|"]
    a_total = sum(authors.bp.values())
    for label, p in [*ours.items(), ("authors H100", authors)]:
        b, f = sum(p.bp.values()), sum(p.fwd.values())
        loop = p.meta.get("unstamped_backward")
        lines.append(f"| {label} | {len(p.units)} | {b * 1e3:.2f} | {f * 1e3:.2f} | {p.step_time * 1e3:.2f} | "
                     f"{b / a_total:.2f} | {'' if loop is None else f'{loop * 1e3:.2f}'} |")
    lines += ["", "*backward ms* is the profile's: the median start-up pass, with the gradient readiness of every unit "
              "stamped. *loop iterations without stamps*: the median backward of the same run's training iterations "
              "that stamp nothing (run.json beside the profile): the two agree when stamping costs the device "
              "nothing (before dreamddp.clock.Stamps took CUDA events, a synchronisation at every stamp "
              "stretched the pass). *step ms*: the profile's step_time: the optimizer step alone in a profile "
              "without optimizer_time (made before the profiler kept it), else the whole pass less its forward "
              "and backward."]
    rows = []
    for u in common:
        row = {"unit": u, "authors_ms": authors.bp[u] * 1e3, "mib": nbytes.get(u, 0) / 2**20}
        for label, p in ours.items():
            row[f"{label}_ms"] = p.bp[u] * 1e3
            row[f"{label}_ratio"] = p.bp[u] / authors.bp[u] if authors.bp[u] > 0 else float("nan")
        rows.append(row)
    lines += ["", f"Rank correlation (Spearman) of per-layer backward time over the {len(common)} layers both "
              "hold: " + ", ".join(f"{label} {spearman([p.bp[u] for u in common], [authors.bp[u] for u in common]):.3f}"
                                   for label, p in ours.items()) + ".",
              f"The authors' {len(param_free)} parameter-free layers (dropout, activations, ...) hold "
              f"{sum(authors.bp[u] for u in param_free) * 1e3:.2f} ms of their backward; our units' times absorb "
              "theirs (a unit's time runs from the previous unit's gradient to its own)."]
    lines += ["", "| layer (backward order) | MiB | authors ms | " + " | ".join(f"{l} ms | {l} / authors" for l in ours)
              + " |", "|---" * (3 + 2 * len(ours)) + "|"]
    for r in rows:
        cells = " | ".join(f"{r[f'{l}_ms']:.3f} | {r[f'{l}_ratio']:.2f}" for l in ours)
        lines.append(f"| {r['unit']} | {r['mib']:.2f} | {r['authors_ms']:.3f} | {cells} |")
    lines += ["", f"## Schedules and modelled iteration times, {workers} GPUs, H={H}", "",
              "All-reduce times from our model's bytes per layer over a ring at the link rate (no latency term). "
              "Schedules: which units sync in each iteration of the window, ours (DreamDDP's scheduler with "
              "bubble filling) and the authors' DFS (no filling).", ""]
    table = []
    for g in gbps:
        for label, p in [*ours.items(), ("authors H100", authors)]:
            lp = on_link(p, nbytes, workers, g)
            ours_sched = make_schedule(lp, H, "dreamddp", bubble=True)
            dfs_sched = authors_dfs(aligned(lp), H)
            lines.append(f"- {g:g} Gbit/s, {label}: ours {per_iteration(ours_sched, H, nbytes)}; "
                         f"authors' DFS {per_iteration(dfs_sched, H, nbytes)}")
            for m in ("simulator", "authors"):
                for r in iteration_time_table(lp, H, m):
                    table.append({"model": model, "profile": label, "gbps": g, "workers": workers, "cost_model": m,
                                  "algorithm": r["algorithm"], "iteration_s": r["iteration_s"]})
    algos = list(dict.fromkeys(r["algorithm"] for r in table if r["cost_model"] == "authors"))
    lines += ["", "| Gbit/s | profile | cost model | " + " | ".join(algos) + " | FLSGD / DreamDDP |",
              "|---" * (4 + len(algos)) + "|"]
    keyed = {(r["gbps"], r["profile"], r["cost_model"], r["algorithm"]): r["iteration_s"] for r in table}
    for g in gbps:
        for label in [*ours, "authors H100"]:
            for m in ("simulator", "authors"):
                cells = [keyed.get((g, label, m, a)) for a in algos]
                ratio = keyed.get((g, label, m, "flsgd"), 0) / keyed.get((g, label, m, "dreamddp"), float("inf"))
                lines.append(f"| {g:g} | {label} | {m} | " + " | ".join("" if c is None else f"{c:.4f}" for c in cells)
                             + f" | {ratio:.2f} |")
    return lines, rows, table


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m dreamddp.bench.gpu_profiles", description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--ours", nargs="+", required=True, metavar="LABEL=DIR")
    p.add_argument("--authors", required=True)
    p.add_argument("--H", type=int, default=10)
    p.add_argument("--workers", type=int, default=32)
    p.add_argument("--gbps", type=float, nargs="+", default=[1.0, 10.0])
    p.add_argument("--out", default="results/gpu")
    args = p.parse_args(argv)
    try:
        ours = {}
        for item in args.ours:
            label, sep, path = item.partition("=")
            if not sep:
                raise ValueError(f"--ours {item}: expected LABEL=DIR")
            ours[label] = load_profile(path)
            ours[label].meta["unstamped_backward"] = unstamped_backward(Path(path).parent / "run.json")
            if not ours[label].nbytes:
                raise ValueError(f"--ours {item}: the profile has no nbytes.json (one of ours is needed)")
        authors = load_profile(args.authors)
    except (OSError, ValueError) as e:
        print(f"gpu_profiles: {e}", file=sys.stderr)
        return 2
    lines, rows, table = compare(args.model, ours, authors, args.H, args.workers, args.gbps)
    out = Path(args.out)
    write_text(out / f"profiles_{args.model}.md", "\n".join(lines) + "\n")
    write_csv(out / f"profiles_{args.model}_layers.csv", rows)
    write_csv(out / f"profiles_{args.model}_modelled.csv", table)
    print("\n".join(lines[:8]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
