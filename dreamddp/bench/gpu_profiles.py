"""Our per-layer GPU profiles next to the DreamDDP authors' H100 profiles, and what each gives.

Part of ``dreamddp-bench gpu --reports``: writes ``<out>/profiles_<model>.md`` (and csv) with the
backward totals, the per-layer ratios to the authors' times and their rank correlation, and per link
rate the DreamDDP schedules (ours with bubble filling, the authors' DFS) and modelled iteration times.
Every profile's all-reduce times come from our model's bytes over a ring at the link rate, so the
profiles differ in compute alone (the authors' comm.json is their own cluster's).
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
from dreamddp.reports.render import render
from dreamddp.schedule.authors_model import aligned
from dreamddp.schedule.dfs import dreamddp as authors_dfs
from dreamddp.schedule.make import make_schedule
from dreamddp.schedule.profile import Profile, load_profile

AUTHORS = "authors H100"


def spearman(a: list[float], b: list[float]) -> float:
    """Rank correlation, ties sharing their mean rank."""
    def ranks(x):
        x = np.asarray(x, dtype=float)
        return np.array([np.flatnonzero(np.sort(x) == v).mean() for v in x])
    return float(np.corrcoef(ranks(a), ranks(b))[0, 1])


def unstamped_backward(record: Path) -> float | None:
    """Median backward seconds of the run's loop iterations that stamped no unit (iteration % H != 0)."""
    if not record.is_file():
        return None
    rec = json.loads(record.read_text())
    H = rec["config"]["algo"].get("H") or 1
    rows = [r["backward"] for r in rec["iterations"] if r["iteration"] % H]
    return statistics.median(rows) if rows else None


def on_link(profile: Profile, nbytes: dict[str, int], workers: int, gbps: float) -> Profile:
    """``profile`` with every unit's all-reduce time from its bytes (0 for a parameter-free layer)
    over a ring of ``workers`` at ``gbps``."""
    comm = {u: collective_time("all_reduce", nbytes.get(u, 0), workers, gbps) for u in profile.units}
    return replace(profile, comm=comm, nbytes={u: nbytes.get(u, 0) for u in profile.units},
                   meta={**profile.meta, "world": workers, "gbps": gbps})


def per_iteration(schedule: dict[str, list[int]], H: int, nbytes: dict[str, int]) -> str:
    """Units and MiB synced in each iteration of the window."""
    counts, mib = [0] * H, [0.0] * H
    for u, its in schedule.items():
        for t in its:
            counts[t] += 1
            mib[t] += nbytes.get(u, 0) / 2**20
    return "units " + " ".join(map(str, counts)) + "; MiB " + " ".join(f"{m:.0f}" for m in mib)


def compare(model: str, ours: dict[str, Profile], authors: Profile, H: int, workers: int, gbps: list[float]):
    """The report's text, its per-layer rows and its modelled iteration times."""
    first = next(iter(ours.values()))
    nbytes, every = first.nbytes, {**ours, AUTHORS: authors}
    common = [u for u in first.units if u in authors.bp]
    param_free = [u for u in authors.units if u not in first.bp]
    a_total = sum(authors.bp.values())
    profiles = [{"label": label, "units": len(p.units), "backward_ms": sum(p.bp.values()) * 1e3,
                 "forward_ms": sum(p.fwd.values()) * 1e3, "step_ms": p.step_time * 1e3,
                 "to_authors": sum(p.bp.values()) / a_total, "loop_ms": p.meta.get("unstamped_backward")
                 and p.meta["unstamped_backward"] * 1e3} for label, p in every.items()]
    rows = []
    for u in common:
        row = {"unit": u, "authors_ms": authors.bp[u] * 1e3, "mib": nbytes.get(u, 0) / 2**20}
        for label, p in ours.items():
            row[f"{label}_ms"] = p.bp[u] * 1e3
            row[f"{label}_ratio"] = p.bp[u] / authors.bp[u] if authors.bp[u] > 0 else float("nan")
        rows.append(row)
    schedules, table = [], []
    for g in gbps:
        for label, p in every.items():
            lp = on_link(p, nbytes, workers, g)
            schedules.append((g, label, per_iteration(make_schedule(lp, H, "dreamddp", bubble=True), H, nbytes),
                              per_iteration(authors_dfs(aligned(lp), H), H, nbytes)))
            table += [{"model": model, "profile": label, "gbps": g, "workers": workers, "cost_model": m,
                       "algorithm": r["algorithm"], "iteration_s": r["iteration_s"]}
                      for m in ("simulator", "authors") for r in iteration_time_table(lp, H, m)]
    algos = list(dict.fromkeys(r["algorithm"] for r in table if r["cost_model"] == "authors"))
    keyed = {(r["gbps"], r["profile"], r["cost_model"], r["algorithm"]): r["iteration_s"] for r in table}
    modelled = [(g, label, m, [keyed.get((g, label, m, a)) for a in algos],
                 keyed.get((g, label, m, "flsgd"), 0) / keyed.get((g, label, m, "dreamddp"), float("inf")))
                for g in gbps for label in every for m in ("simulator", "authors")]
    text = render("profiles.md.j2", model=model, profiles=profiles, ours=list(ours), rows=rows,
                  spearman=[(label, spearman([p.bp[u] for u in common], [authors.bp[u] for u in common]))
                            for label, p in ours.items()],
                  param_free=len(param_free), param_free_ms=sum(authors.bp[u] for u in param_free) * 1e3,
                  workers=workers, H=H, schedules=schedules, algos=algos, modelled=modelled)
    return text, rows, table


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
    text, rows, table = compare(args.model, ours, authors, args.H, args.workers, args.gbps)
    out = Path(args.out)
    write_text(out / f"profiles_{args.model}.md", text)
    write_csv(out / f"profiles_{args.model}_layers.csv", rows)
    write_csv(out / f"profiles_{args.model}_modelled.csv", table)
    print("\n".join(text.split("\n")[:8]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
