"""DreamDDP next to the systems it seeds from: S-SGD, Streaming DiLoCo, DeAR.

Runs, back to back on one machine, the same model / data / workers at one low
emulated bandwidth (``bandwidth.backend=emulated``, ``--gbps``):

    ssgd | dreamddp | dreamddp + overlap_forward | streaming_diloco | dear

dreamddp runs first (it profiles and schedules); the overlap variant reuses
its schedule file.  Each run is a ``python -m dreamddp.cli`` subprocess; its
peak memory is the max resident set size over the run's process tree
(``os.wait4``: Linux reports the largest single process, i.e. one worker).
Printed per algorithm: measured mean iteration time, exposed wait, traffic per
iteration (payload bytes as the run record counts them: dear's reduce-scatter
and all-gather each count the full bucket, so also the wire bytes a worker
sends), peak RSS (tree max; the record's rank-0 value is in the csv), the simulator's prediction (from dreamddp's profile) and
ratios to dreamddp.

Usage::

    python runners/bench_seed_systems.py --iterations 30 --gbps 0.1 --nproc 2
    python runners/bench_seed_systems.py --diloco algo.quantize=e3m0 algo.tau=2

Writes ``seed_systems.csv`` / ``.md`` and keeps the run records under ``--out``.
"""

from __future__ import annotations

import argparse
import os

from benchlib import run_training, simulate_records, write_tables

RUNS = {  # label -> Hydra overrides
    "ssgd": ["algo=ssgd"],
    "dreamddp": ["algo=dreamddp"],
    "dreamddp+overlap": ["algo=dreamddp", "algo.overlap_forward=true"],
    "streaming_diloco": ["algo=streaming_diloco"],
    "dear": ["algo=dear"],
}


def run(label: str, overrides: list[str], args) -> dict:
    return run_training(os.path.join(args.out, label.replace("+", "_")), [
        *overrides, f"model={args.model}", f"data={args.data}", f"train.iterations={args.iterations}",
        f"cluster.nproc={args.nproc}", f"algo.H={args.H}", "bandwidth.backend=emulated",
        f"bandwidth.gbps={args.gbps}", "train.eval_every=0", *args.override,
    ], label=label)


def predict(records: dict, args) -> dict:
    """Simulator predictions on dreamddp's measured profile at the same link."""
    from dreamddp.schedule import load_profile

    profile = load_profile(os.path.join(records["dreamddp"]["_dir"], "profile"))
    return {label: r.mean_iter for label, r in simulate_records(profile, records, args.nproc, args.gbps).items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="gpt2")
    p.add_argument("--data", default="shakespeare")
    p.add_argument("--iterations", type=int, default=30)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--H", type=int, default=10)
    p.add_argument("--gbps", type=float, default=0.1, help="emulated link rate (Gbit/s)")
    p.add_argument("--runs", nargs="+", default=list(RUNS), choices=list(RUNS))
    p.add_argument("--diloco", nargs="*", default=[], help="extra overrides for streaming_diloco only")
    p.add_argument("--out", default="results/seed_systems")
    p.add_argument("override", nargs="*", help="extra Hydra overrides for every run")
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)

    records = {}
    for label in ["dreamddp"] + [r for r in args.runs if r != "dreamddp"]:
        extra = list(RUNS[label])
        if label == "dreamddp+overlap":
            extra.append(f"algo.schedule={os.path.join(records['dreamddp']['_dir'], 'schedule.json')}")
        if label == "streaming_diloco":
            extra += args.diloco
        records[label] = run(label, extra, args)
        print(f"  {label}: done", flush=True)
    pred = predict(records, args)

    base = records["dreamddp"]
    b = base["summary"]
    rows = []
    for label, rec in records.items():
        s = rec["summary"]
        rows.append({
            "algorithm": label, "iter_s": s["mean_iteration_time"], "predicted_s": pred[label],
            "wait_s": s["mean_wait"], "MiB_per_iter": s["bytes_per_iteration"] / 2**20,
            "wire_MiB_per_iter": sum(r["wire_bytes"] for r in rec["iterations"]) / len(rec["iterations"]) / 2**20,
            "peak_rss_MiB": rec["_peak_rss"] / 2**20, "rank0_rss_MiB": s.get("peak_rss_mib", float("nan")),
            "time_vs_dreamddp": s["mean_iteration_time"] / b["mean_iteration_time"],
            "bytes_vs_dreamddp": s["bytes_per_iteration"] / b["bytes_per_iteration"] if b["bytes_per_iteration"] else float("nan"),
            "rss_vs_dreamddp": rec["_peak_rss"] / base["_peak_rss"],
        })
    header = (f"model={args.model} data={args.data} workers={args.nproc} H={args.H} emulated {args.gbps * 1e3:g} Mbit/s "
              f"iterations={args.iterations}")
    print(header)
    print(f"{'algorithm':<18}{'iter s':>9}{'pred s':>9}{'wait s':>9}{'MiB/it':>9}{'wire/it':>9}{'RSS MiB':>9}"
          f"{'t/dream':>9}{'B/dream':>9}{'M/dream':>9}")
    for r in rows:
        print(f"{r['algorithm']:<18}{r['iter_s']:>9.4f}{r['predicted_s']:>9.4f}{r['wait_s']:>9.4f}{r['MiB_per_iter']:>9.3f}"
              f"{r['wire_MiB_per_iter']:>9.3f}{r['peak_rss_MiB']:>9.1f}{r['time_vs_dreamddp']:>9.3f}{r['bytes_vs_dreamddp']:>9.3f}{r['rss_vs_dreamddp']:>9.3f}")
    write_tables(args.out, "seed_systems", header, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
