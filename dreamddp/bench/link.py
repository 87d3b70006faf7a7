"""Measure gloo all-reduce time under a link backend against the ring formula.

    dreamddp-bench link --backend tc --gbps 1 --workers 4
    dreamddp-bench link --backend tc --gbps 1,1,1,0.25     # one slow worker
    dreamddp-bench link --backend emulated --gbps 1 --calibration 1.05
    dreamddp-bench link --backend ideal --gbps 1
    dreamddp-bench link --backend tc --gbps 0.05 --workers 2 --kind reduce_scatter   # DeAR's collectives
    dreamddp-bench link --backend tc --gbps 0.05 --workers 2 --kind reduce_scatter --native  # gloo's own

Prints per payload size the mean measured time (slowest rank), the ring formula at the slowest link,
their ratio, and a suggested ``bandwidth.calibration``: the median ratio over the larger half of the
sizes, where fixed costs no longer dominate and per-byte overhead (TCP/IP, gloo framing) is left.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="dreamddp-bench link", description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=["tc", "emulated", "ideal"], required=True)
    p.add_argument("--gbps", default=None, help="link rate; tc also takes one value per worker: 1,1,0.25")
    p.add_argument("--workers", type=int, default=None, help="default: 4, or the number of --gbps values")
    p.add_argument("--sizes-mb", type=float, nargs="+", default=[1, 4, 16, 64])
    p.add_argument("--kind", default="all_reduce", choices=["all_reduce", "reduce_scatter", "all_gather"],
                   help="the collective timed; sizes are its whole tensor "
                        "(a reduce-scatter's input, an all-gather's output)")
    p.add_argument("--native", action="store_true",
                   help="tc/ideal, reduce_scatter/all_gather: time gloo's own (reduce_scatter_tensor, "
                        "all_gather_into_tensor) instead of the engine's (all-to-alls on gloo, comm/communicator.py)")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--latency-ms", type=float, default=0.0, help="emulated link latency (and formula)")
    p.add_argument("--calibration", type=float, default=1.0, help="emulated link calibration")
    p.add_argument("--shape-download", action="store_true", help="tc: also shape each worker's download")
    p.add_argument("--gap-ms", type=float, default=0.0,
                   help="idle time before each timed collective (as compute between a job's collectives)")
    p.add_argument("--warm-tcp", action="store_true",
                   help="tc: no slow start after an idle spell (net.ipv4.tcp_slow_start_after_idle=0 per worker)")
    p.add_argument("--json", default=None, help="also write the rows as JSON here")
    p.add_argument("--worker-out", default=None, help=argparse.SUPPRESS)  # internal: worker mode
    a = p.parse_args(argv)
    rates = [float(g) for g in a.gbps.split(",")] if a.gbps else []
    if a.backend != "ideal" and not rates:
        p.error(f"--backend {a.backend} needs --gbps")
    if len(rates) > 1 and a.backend != "tc":
        p.error("per-worker --gbps lists are only supported by --backend tc")
    a.workers = a.workers or (len(rates) if len(rates) > 1 else 4)
    if len(rates) > 1 and len(rates) != a.workers:
        p.error(f"--gbps has {len(rates)} values for --workers {a.workers}")
    if a.workers < 2 or a.reps < 1 or any(s <= 0 for s in a.sizes_mb) or any(g <= 0 for g in rates):
        p.error("need --workers >= 2, --reps >= 1, positive --sizes-mb and --gbps")
    a.rates = rates * a.workers if len(rates) == 1 else rates
    return a


def worker(a: argparse.Namespace) -> None:
    """One rank: time each size ``reps`` times after a warm-up; rank 0 writes."""
    import torch
    import torch.distributed as dist

    from dreamddp.comm.communicator import Communicator

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    world = dist.get_world_size()
    shard = lambda t: torch.ones(t.numel() // world, dtype=t.dtype)  # noqa: E731  (one rank's share)
    if a.native and a.backend != "emulated":  # the backend's own, unpaced: what crosses the shaped wire
        kinds = {"all_reduce": dist.all_reduce, "reduce_scatter": lambda t: dist.reduce_scatter_tensor(shard(t), t),
                 "all_gather": lambda t: dist.all_gather_into_tensor(t, shard(t))}
    else:  # the engine's, paced on the emulated link; on gloo its reduce-scatter and all-gather are all-to-alls
        from dreamddp.comm.links.emulated import EmulatedLink

        emulated = a.backend == "emulated"
        comm = Communicator(group=None, link=EmulatedLink(a.rates[0], a.latency_ms, a.calibration, alpha_s=0.0)
                            if emulated else None)
        kinds = {"all_reduce": (lambda t: comm.all_reduce_avg(t).wait()) if emulated else dist.all_reduce,
                 "reduce_scatter": lambda t: comm.reduce_scatter_avg(t, shard(t)).wait(),
                 "all_gather": lambda t: comm.all_gather(t, shard(t)).wait()}
    reduce, rows = kinds[a.kind], []
    for mb in a.sizes_mb:
        flat = torch.ones(max(1, int(mb * 1e6) // 4 // world * world), dtype=torch.float32)
        times = []
        for rep in range(a.reps + 1):
            if a.gap_ms:  # idle first: the barrier's few bytes barely reopen a restarted window
                time.sleep(a.gap_ms / 1e3)
            dist.barrier()
            t0 = time.perf_counter()
            reduce(flat)
            dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
            dist.all_reduce(dt, op=dist.ReduceOp.MAX)  # the collective ends when its slowest rank does
            if rep:  # rep 0 warms up connections and buffers
                times.append(dt.item())
        rows.append({"nbytes": flat.numel() * 4, "times": times})
    if dist.get_rank() == 0:
        with open(a.worker_out, "w") as f:
            json.dump({"world": world, "rows": rows}, f)
    dist.barrier()
    dist.destroy_process_group()


def _launch_local(a: argparse.Namespace, argv_for_rank) -> int:
    """emulated/ideal: plain processes on 127.0.0.1 with torchrun's variables."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [subprocess.Popen(argv_for_rank(rank), env={
        **os.environ, "RANK": str(rank), "WORLD_SIZE": str(a.workers), "LOCAL_RANK": str(rank),
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}) for rank in range(a.workers)]
    return next((c for c in [p.wait() for p in procs] if c), 0)


def measure(a: argparse.Namespace, argv: list[str]) -> list[dict]:
    """Run the workers (``argv``: this command's) under the chosen backend; rows with time/formula/ratio."""
    from dreamddp.comm.cost import collective_time

    with tempfile.TemporaryDirectory(prefix="linkcheck") as tmp:
        out = os.path.join(tmp, "rows.json")
        argv_for_rank = lambda rank: [sys.executable, "-m", "dreamddp.bench.link", *argv,  # noqa: E731
                                      "--worker-out", out]
        if a.backend == "tc":
            from dreamddp.netshape import ShapedNetwork, check_tc_available, launch_shaped

            check_tc_available()
            with ShapedNetwork(a.workers, a.rates, shape_download=a.shape_download,
                               slow_start_after_idle=not a.warm_tcp) as net:
                code = launch_shaped(net, argv_for_rank, dict(os.environ), 29500)
        else:
            code = _launch_local(a, argv_for_rank)
        if code != 0:
            raise SystemExit(f"linkcheck: workers failed with exit code {code}")
        with open(out) as f:
            result = json.load(f)
    rows = []
    for r in result["rows"]:
        mean = statistics.fmean(r["times"])
        formula = (collective_time(a.kind, r["nbytes"], a.workers, min(a.rates), a.latency_ms / 1e3)
                   if a.rates else None)
        rows.append({"nbytes": r["nbytes"], "mean_s": mean, "median_s": statistics.median(r["times"]),
                     "times": r["times"], "formula_s": formula, "ratio": mean / formula if formula else None})
    return rows


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    a = parse_args(argv)
    if a.worker_out:
        worker(a)
        from dreamddp.run.dist_env import exit_worker

        exit_worker(0)  # a gloo worker: no interpreter finalization (see exit_worker)
    rows = measure(a, argv)
    path = "" if a.kind == "all_reduce" or a.backend == "emulated" else f" path={'native' if a.native else 'engine'}"
    print(f"backend={a.backend} kind={a.kind}{path} workers={a.workers} gbps={a.rates or '-'} reps={a.reps}")
    print(f"{'size_MB':>9} {'measured_s':>11} {'formula_s':>10} {'ratio':>7}")
    for r in rows:
        f = f"{r['formula_s']:10.4f}" if r["formula_s"] else f"{'-':>10}"
        q = f"{r['ratio']:7.3f}" if r["ratio"] else f"{'-':>7}"
        print(f"{r['nbytes'] / 1e6:9.2f} {r['mean_s']:11.4f} {f} {q}")
    # the median ratio over the larger half of the sizes
    big = [r["ratio"] for r in sorted(rows, key=lambda r: r["nbytes"]) if r["ratio"]]
    cal = statistics.median(big[len(big) // 2:]) if big else None
    if cal is not None:
        print(f"suggested bandwidth.calibration={cal:.3f}  (median ratio over the larger sizes)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": {k: v for k, v in vars(a).items() if k != "worker_out"},
                       "rows": rows, "suggested_calibration": cal}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
