"""Real kernel shaping (tc) against the emulated link, algorithm by algorithm.

Every algorithm runs the same job twice at one bandwidth: once with each
worker in a tbf-shaped network namespace (``bandwidth.backend=tc``), once on
loopback paced by the emulated link (``bandwidth.backend=emulated``, times
``--calibration``).  dreamddp profiles and schedules in its tc run; its
emulated run reads that schedule.json, so both follow one schedule.  The table
puts mean iteration time and exposed wait side by side with tc/emulated.

Pick a link-dominated setting (communication >> compute): then the ratio
measures the link model, not CPU noise.  The defaults (tiny GPT-2, 2 samples
of 32 tokens, 50 Mbit/s) spend ~0.4 s per full all-reduce against ~50 ms of
compute on a CPU.

    python runners/bench_tc_vs_emulated.py --gbps 0.05 --iterations 12 --nproc 2 --model gpt2 \\
        --calibration 1.04

Needs root (or unprivileged user namespaces), ``ip`` and ``tc``.  Writes
``tc_vs_emulated.csv`` / ``.md`` and keeps the run records in ``--out/runs``.
"""

from __future__ import annotations

import argparse
import os

from benchlib import run_training, write_tables

ALGOS = ["ssgd", "ascwfbp", "flsgd", "plsgd_enp", "dreamddp"]
COLUMNS = ["algorithm", "tc_s", "emulated_s", "tc/emulated", "tc_wait_s", "emulated_wait_s",
           "compute_s", "MiB_per_iter"]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gbps", type=float, default=0.05, help="link rate for both backends (Gbit/s)")
    p.add_argument("--iterations", type=int, default=12, help="train.iterations per run")
    p.add_argument("--nproc", type=int, default=2, help="workers")
    p.add_argument("--model", default="gpt2")
    p.add_argument("--data", default=None, help="default: the model's own default dataset")
    p.add_argument("--batch-size", type=int, default=2)
    p.add_argument("--block-size", type=int, default=32, help="tokens per sample (language models)")
    p.add_argument("--H", type=int, default=4, help="sync period of flsgd, plsgd_enp, dreamddp")
    p.add_argument("--profile-iterations", type=int, default=2, help="dreamddp profiling in its tc run")
    p.add_argument("--calibration", type=float, default=1.0,
                   help="emulated link's bandwidth.calibration (runners/linkcheck.py suggests one)")
    p.add_argument("--algos", nargs="+", default=ALGOS, choices=ALGOS)
    p.add_argument("--out", default="results/tc_vs_emulated")
    p.add_argument("override", nargs="*", help="extra Hydra overrides for every run")
    a = p.parse_args(argv)
    for name, low in (("gbps", 0), ("calibration", 0)):
        if not getattr(a, name) > low:
            p.error(f"--{name} must be > {low}")
    for name, low in (("iterations", 3), ("nproc", 2), ("batch_size", 1), ("block_size", 1), ("H", 1),
                      ("profile_iterations", 1)):
        if getattr(a, name) < low:
            p.error(f"--{name.replace('_', '-')} must be >= {low}")
    return a


def _run(a: argparse.Namespace, algo: str, backend: str, extra: list[str]) -> dict:
    """One dreamddp-run job; its run record (the log is kept next to it)."""
    overrides = [
        f"algo={algo}", f"model={a.model}", *([f"data={a.data}"] if a.data else []),
        f"train.iterations={a.iterations}", f"train.batch_size={a.batch_size}", f"data.block_size={a.block_size}",
        f"cluster.nproc={a.nproc}", "train.eval_every=0", "data.eval_batches=1",
        f"bandwidth.backend={backend}", f"bandwidth.gbps={a.gbps}", *extra, *a.override,
    ]
    if algo in ("flsgd", "plsgd_enp", "dreamddp"):
        overrides.append(f"algo.H={a.H}")
    if backend == "emulated":
        # The eager carrier: gloo moves the bytes while the workers compute, as it must over tc,
        # so the two runs differ in the link only.
        overrides += [f"bandwidth.calibration={a.calibration}", "bandwidth.carrier=eager"]
    rec = run_training(os.path.join(a.out, "runs", f"{algo}_{backend}"), overrides, label=f"algo={algo} backend={backend}")
    print(f"  {algo:<10} {backend:<9} {rec['summary']['mean_iteration_time']:.4f} s/it ({rec['_wall']:.0f} s wall)",
          flush=True)
    return rec


def compare(a: argparse.Namespace, algo: str) -> dict:
    tc = _run(a, algo, "tc", [f"warmup.profile_iterations={a.profile_iterations}"] if algo == "dreamddp" else [])
    extra = []
    if algo == "dreamddp":  # both runs follow the schedule profiled over the shaped link
        extra = [f"algo.schedule={os.path.abspath(os.path.join(a.out, 'runs', 'dreamddp_tc', 'schedule.json'))}"]
    emu = _run(a, algo, "emulated", extra)
    t, e = tc["summary"], emu["summary"]
    return {
        "algorithm": algo, "tc_s": t["mean_iteration_time"], "emulated_s": e["mean_iteration_time"],
        "tc/emulated": t["mean_iteration_time"] / e["mean_iteration_time"],
        "tc_wait_s": t["mean_wait"], "emulated_wait_s": e["mean_wait"],
        "compute_s": t["mean_forward"] + t["mean_backward"], "MiB_per_iter": t["bytes_per_iteration"] / 2**20,
    }


def main(argv=None) -> int:
    a = parse_args(argv)
    from dreamddp.netshape import TcUnavailable, check_tc_available

    try:
        check_tc_available()
    except TcUnavailable as exc:
        raise SystemExit(f"bench_tc_vs_emulated: {exc}") from None
    os.makedirs(a.out, exist_ok=True)
    header = (f"model={a.model} workers={a.nproc} batch={a.batch_size} block={a.block_size} H={a.H} "
              f"iterations={a.iterations}; link {a.gbps * 1e3:g} Mbit/s, emulated calibration {a.calibration}; "
              f"times are means over timed iterations (seconds)")
    print(header, flush=True)
    rows = [compare(a, algo) for algo in a.algos]
    write_tables(a.out, "tc_vs_emulated", header, [{c: r[c] for c in COLUMNS} for r in rows])
    print(f"{'algorithm':<11}{'tc':>9}{'emulated':>10}{'ratio':>8}{'tc wait':>9}{'emu wait':>10}{'compute':>9}{'MiB/it':>8}")
    for r in rows:
        print(f"{r['algorithm']:<11}{r['tc_s']:>9.4f}{r['emulated_s']:>10.4f}{r['tc/emulated']:>8.3f}"
              f"{r['tc_wait_s']:>9.4f}{r['emulated_wait_s']:>10.4f}{r['compute_s']:>9.4f}{r['MiB_per_iter']:>8.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
