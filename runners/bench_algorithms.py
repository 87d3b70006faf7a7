"""Side-by-side benchmark: every engine algorithm on the same model, data and link.

One script, one machine, runs made back to back:

1. ``dreamddp`` first, with the bandwidth set from a comm/backward ratio
   (``bandwidth.comm_ratio``): it measures backward time, fixes the emulated
   link's rate, profiles per unit and schedules.
2. Every other algorithm at exactly that rate (``bandwidth.gbps``).
3. The simulator predicts each algorithm's mean iteration time from the
   dreamddp run's per-unit profile (its compute totals taken from the ssgd
   run's steady state, see ``steady_profile``) and the link model; the table
   prints measured, predicted and their ratio, plus exposed wait, traffic and
   speedups relative to dreamddp.

Usage::

    python runners/bench_algorithms.py --model gpt2 --iterations 40 --ratio 7 --nproc 2

Writes ``bench.csv`` / ``bench.md`` and keeps the run records under ``--out``.
"""

from __future__ import annotations

import argparse
import os

from benchlib import run_training, simulate_records, write_tables

from dreamddp.summary import warmup_cut

ALGOS = ["ssgd", "ascwfbp", "flsgd", "plsgd_enp", "dreamddp"]


def run(algo: str, out: str, args, extra: list[str]) -> dict:
    return run_training(os.path.join(out, algo), [
        f"algo={algo}", f"model={args.model}", f"data={args.data}", f"train.iterations={args.iterations}",
        f"cluster.nproc={args.nproc}", f"algo.H={args.H}", "train.eval_every=0", *extra, *args.override,
    ], label=f"algo={algo}")


def steady_profile(profile, anchor: dict):
    """The dreamddp run's per-unit profile with its totals set to a steady-state training run's.

    Warm-up profiling passes run right after start-up and time the compute
    some 10% low on this machine; the anchor run (ssgd: communication never
    overlaps its compute) measures forward, backward and the rest of the
    iteration (step, bookkeeping) while training.  Per-unit shares come from
    the profile, totals from the anchor; the link stays the model's.
    """
    from dataclasses import replace

    s = anchor["summary"]
    rows = anchor["iterations"][warmup_cut(len(anchor["iterations"])):]
    other = sum(r["time"] - r["forward"] - r["backward"] - r["wait"] for r in rows) / len(rows)
    fwd_scale = s["mean_forward"] / sum(profile.fwd.values())
    bp_scale = s["mean_backward"] / sum(profile.bp.values())
    return replace(profile, fwd={u: v * fwd_scale for u, v in profile.fwd.items()},
                   bp={u: v * bp_scale for u, v in profile.bp.items()}, step_time=other)


def predictions(records: dict, run_dir: str, args, gbps: float) -> dict:
    from dreamddp.schedule import load_profile

    profile = load_profile(os.path.join(run_dir, "profile"))
    if "ssgd" in records:
        profile = steady_profile(profile, records["ssgd"])
    return simulate_records(profile, records, args.nproc, gbps)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="gpt2")
    p.add_argument("--data", default="shakespeare")
    p.add_argument("--iterations", type=int, default=40)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--H", type=int, default=10)
    p.add_argument("--ratio", type=float, default=7.0, help="comm/backward ratio that sets the emulated bandwidth")
    p.add_argument("--algos", nargs="+", default=ALGOS, choices=ALGOS)
    p.add_argument("--out", default="results/bench")
    p.add_argument("override", nargs="*", help="extra Hydra overrides for every run")
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)

    dream = run("dreamddp", args.out, args, ["bandwidth=ratio7", f"bandwidth.comm_ratio={args.ratio}"])
    gbps = dream["extra"]["link_calibration"]["gbps"]
    records = {"dreamddp": dream}
    for algo in args.algos:
        if algo != "dreamddp":
            records[algo] = run(algo, args.out, args, ["bandwidth=1gbit", f"bandwidth.gbps={gbps}"])
    pred = predictions(records, os.path.join(args.out, "dreamddp"), args, gbps)

    base = records["dreamddp"]["summary"]["mean_iteration_time"]
    rows = []
    for algo in [a for a in ALGOS if a in records]:
        s = records[algo]["summary"]
        rows.append({
            "algorithm": algo, "measured_s": s["mean_iteration_time"], "predicted_s": pred[algo].mean_iter,
            "measured/predicted": s["mean_iteration_time"] / pred[algo].mean_iter,
            "exposed_wait_s": s["mean_wait"], "predicted_wait_s": pred[algo].mean_wait,
            "MiB_per_iter": s["bytes_per_iteration"] / 2**20, "speedup_of_dreamddp": s["mean_iteration_time"] / base,
        })
    header = (f"model={args.model} data={args.data} workers={args.nproc} H={args.H} "
              f"emulated link {gbps * 1e3:.2f} Mbit/s (comm/backward = {args.ratio}) iterations={args.iterations}")
    print(header)
    print(f"{'algorithm':<11}{'measured':>10}{'predicted':>11}{'ratio':>8}{'wait':>9}{'pred.wait':>11}{'MiB/it':>9}{'x dreamddp':>12}")
    for r in rows:
        print(f"{r['algorithm']:<11}{r['measured_s']:>10.4f}{r['predicted_s']:>11.4f}{r['measured/predicted']:>8.3f}"
              f"{r['exposed_wait_s']:>9.4f}{r['predicted_wait_s']:>11.4f}{r['MiB_per_iter']:>9.3f}{r['speedup_of_dreamddp']:>12.3f}")
    write_tables(args.out, "bench", header, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
