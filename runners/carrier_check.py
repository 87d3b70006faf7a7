"""Does gloo move bytes while the workers compute?  The measurement behind ``bandwidth.carrier``.

Each of ``--nproc`` workers launches ``--collectives`` small all-reduces (as a
backward pass launches per-unit averages), computes for ``--compute-ms``, then
waits for them (eager), or launches them only when it waits, merged into one
(deferred, what comm/communicator.py does).  Printed per worker and mode, as
medians over ``--reps``: how many had completed by the end of the compute and
how long the wait after it took.  Run it under torchrun:

    python -m torch.distributed.run --nproc-per-node 4 runners/carrier_check.py

On this project's 2-core host with 4 workers, of 10 eager all-reduces of 1,000
floats launched before 100 ms of compute, between 0 and 9 had completed at its
end (the median per worker varies that much from run to run: gloo's threads
compete with the computing workers for the cores), and the wait after it was
2.5-29 ms.  What decides is the training loop: in `make bench` (small GPT-2, 4
workers) DreamDDP takes 0.130 s per iteration deferred vs 0.148 s eager
(``--only flsgd plsgd_enp dreamddp``, with and without
``--set bandwidth.carrier=eager``), so on CPU the real collectives are
deferred to the wait.

``--contention-mib`` (a second measurement, after the first): does a transfer
still running take the computing worker's core?  Each worker computes a fixed
amount of work (200 products of 256 x 256 floats) alone, and beside an
asynchronous all-reduce of each size started just before it (what a queued
carrier's flush leaves running past a wait); rank 0 prints, as medians, how
much longer the compute took and that over the all-reduce's own time alone.
With 2 workers (``--nproc-per-node 2``; the compute thread of each on a core
of its own, gloo's threads free to run anywhere), three runs on 2026-11-28: 0.5-1.0
x at 4 and 16 MiB (+1.3 to +10.6 ms), 0.2-0.9 x at 1 MiB (a transfer of
1-1.6 ms).  gloo's copies and sums run on the computing cores, so
dreamddp/schedule/simulator.py charges the compute after a wait all of a real
transfer still running (``occupy``), the upper end.

``--after-model`` (a third measurement): does what a DreamDDP iteration does at
its wait slow the compute after it, once it is over?  Each worker trains the
model's compute preset (batch 8, synthetic data, SGD) in alternating chunks of
10 iterations, ending each backward with nothing, a blocking all-reduce of
``--after-mib`` (one iteration's units, as the deferred carrier runs it at the
wait), a barrier (a sync point with no bytes) or a sleep of each
``--after-sleep-ms`` (the link's deadline); rank 0 prints the medians of
forward, backward and step, the time at the end of backward, and the mean
forward + backward + step against the plain chunks'.  ResNet-18, 2 workers,
12 chunks each, three runs on 2026-11-29 (1.7 MiB, sleeps of 6 and 45 ms;
plain 96.3, 99.2, 100.8 ms: forward 32-35 ms, backward 60-63, step 3.6, so
backward / forward 1.9 and the step 6% of backward, a GPU's split): after the all-reduce +1.7, +0.9, -0.3 ms; after
the barrier +1.0, +0.9, +0.6; after the sleeps +1.7, -0.3, -0.4 (6 ms) and
+1.3, -1.2, +0.7 (45 ms).  At most about 1% each, the size of the run-to-run
spread: none of them is the 2.7% (3.7 ms of 137) by which DreamDDP's forward
and backward ran over the compute-only runs' in `make bench` (results/README.md).
It then times the same bytes through the link's start-up probe, as the
warm-up runs it (``Communicator.probe_latency`` after a barrier, back to back,
nothing computed before it; the slowest rank's), and, from every rank's
clock, how far apart the ranks reached each sync point, how long it took once
the last had, and how much each rank's forward + backward + step varied.
Three runs on 2026-11-29 (8 chunks each; plain 94-97 ms): the probe took 0.7,
2.3, 0.8 ms (medians of 8 probes); at the end of backward the all-reduce took
3.5, 2.9, 4.0 ms (medians; means 3.9, 3.5, 4.2) after the last rank reached
it; a barrier there 0.4, 0.4, 0.3.  With ``--pin-workers`` (each worker,
gloo's threads too, on a core of its own), one run: the probe 3.9 ms, at the
end of backward 2.9.
gloo moved the 1.7 MiB at two speeds, about 0.7 ms or about 3 ms, the fast
one only in the probe's loop of back-to-back all-reduces with each worker's
threads free to spread over both cores (pinned, never), and right after the
compute the slow one in every run.  The start-up probe mostly saw the fast
speed (results/bench_pin's ten runs: 0.54-0.85 ms for 1 MiB,
and for 256 KiB 0.36-0.46 ms in four, 2.7-3.8 ms in six), so every wait
of DreamDDP's that the link's deadline does not cover costs about 2 ms more
than the simulator charges: the size of the 2.0 ms by which its ResNet-18
iteration ran beyond the model in bench_pin's floating job.  The ranks'
compute varied alike in every kind of chunk (standard deviation 3-6 ms per
rank, with or without a sync point).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--collectives", type=int, default=10)
    p.add_argument("--numel", type=int, default=1000)
    p.add_argument("--compute-ms", type=float, default=100.0)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--contention-mib", type=float, nargs="*", default=[],
                   help="all-reduce sizes for the second measurement (e.g. 1 4 16)")
    p.add_argument("--after-model", choices=["resnet18", "gpt2"], default=None,
                   help="the third measurement on this model's compute preset")
    p.add_argument("--after-mib", type=float, default=1.7, help="its all-reduce (one iteration's units)")
    p.add_argument("--after-sleep-ms", type=float, nargs="*", default=[6.0, 45.0], help="its sleeps")
    p.add_argument("--pin-workers", action="store_true",
                   help="each worker, every thread of it (gloo's too), on a core of its own")
    a = p.parse_args()
    torch.set_num_threads(1)
    if a.pin_workers:  # before the process group starts gloo's threads, which inherit it
        os.sched_setaffinity(0, {int(os.environ["LOCAL_RANK"]) % os.cpu_count()})
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    flat = torch.zeros(a.collectives * a.numel)
    parts = flat.split(a.numel)
    x = torch.randn(128, 128)
    for mode in ("eager", "deferred"):
        done, waits = [], []
        for _ in range(a.reps):
            dist.barrier()
            works = [dist.all_reduce(t, async_op=True) for t in parts] if mode == "eager" else []
            end = time.perf_counter() + a.compute_ms / 1e3
            while time.perf_counter() < end:
                x = torch.tanh(x @ x)
            done.append(sum(w.is_completed() for w in works))
            t0 = time.perf_counter()
            for w in works or [dist.all_reduce(flat, async_op=True)]:
                w.wait()
            waits.append(time.perf_counter() - t0)
        print(f"rank {rank} {mode:8s}: completed during compute {statistics.median(done):.0f}/{len(works) or 1}"
              f", wait after it {1e3 * statistics.median(waits):.1f} ms", flush=True)
    if a.contention_mib:
        contention(rank, a.contention_mib, a.reps)
    if a.after_model:
        after(rank, a.after_model, a.after_mib, a.after_sleep_ms, a.reps)
    dist.barrier()
    dist.destroy_process_group()


def contention(rank: int, sizes_mib: list[float], reps: int) -> None:
    """The module docstring's second measurement."""
    os.sched_setaffinity(0, {rank % os.cpu_count()})  # this thread only: gloo's keep the whole host
    x = torch.randn(256, 256)

    def compute() -> float:
        y, t0 = x, time.perf_counter()
        for _ in range(200):
            y = torch.tanh(y @ x)
        return time.perf_counter() - t0

    compute()
    for mib in sizes_mib:
        buf = torch.zeros(int(mib * 2**20) // 4)
        alone, beside, transfer = [], [], []
        for _ in range(reps):
            dist.barrier()
            alone.append(compute())
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(buf, async_op=True).wait()
            transfer.append(time.perf_counter() - t0)
            dist.barrier()
            work = dist.all_reduce(buf, async_op=True)
            beside.append(compute())
            work.wait()
        c, b, t = (statistics.median(v) for v in (alone, beside, transfer))
        if rank == 0:
            print(f"{mib:5.1f} MiB: compute {1e3 * c:.1f} ms alone, +{1e3 * (b - c):.1f} ms beside the all-reduce "
                  f"({1e3 * t:.1f} ms alone): slowdown / transfer {(b - c) / t:.2f}", flush=True)


def after(rank: int, model_name: str, mib: float, sleeps_ms: list[float], chunks: int) -> None:
    """The module docstring's third measurement."""
    from dreamddp.comm.communicator import Communicator
    from dreamddp.models import MODELS, build_model
    from dreamddp.models.tasks import compute_loss
    from dreamddp.warmup import TRANSFER_PROBE
    from engine_phases import synthetic_batches

    torch.manual_seed(0)
    model = build_model(model_name, "compute")
    task = MODELS[model_name].task
    batches = synthetic_batches(task, model, 4, 8, 128, torch.device("cpu"))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    buf = torch.zeros(int(mib * 2**20) // 4)
    all_reduce = f"all-reduce {mib:g} MiB"
    ends = {"nothing": lambda: None, all_reduce: lambda: dist.all_reduce(buf),
            "barrier": dist.barrier}
    ends.update({f"sleep {ms:g} ms": (lambda ms=ms: time.sleep(ms / 1e3)) for ms in sleeps_ms})
    times: dict[str, list[tuple[float, float, float, float]]] = {name: [] for name in ends}
    marks: dict[str, list[tuple[float, float]]] = {name: [] for name in ends}  # (end of backward, sync done)
    for chunk in range(chunks + 1):  # the first round warms up
        for name, end in ends.items():
            dist.barrier()
            for i in range(10):
                t0 = time.perf_counter()
                loss = compute_loss(task, model, batches[i % len(batches)])
                t1 = time.perf_counter()
                loss.backward()
                t2 = time.perf_counter()
                end()
                t3 = time.perf_counter()
                opt.step()
                opt.zero_grad(set_to_none=False)
                if chunk and i:  # a chunk's first iteration follows the barrier
                    times[name].append((t1 - t0, t2 - t1, time.perf_counter() - t3, t3 - t2))
                    marks[name].append((t2, t3))
    # the same bytes through the link's start-up probe, as the warm-up runs it (dreamddp/warmup)
    probe = Communicator()
    idle = [probe.probe_latency(buf, **TRANSFER_PROBE, numel=buf.numel()) for _ in range(chunks)]
    everyone: list = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, (times, marks, idle))  # perf_counter: the host's monotonic clock, one per host
    if rank == 0:
        plain = statistics.mean(f + b + s for f, b, s, _ in times["nothing"])
        for name, rows in times.items():
            f, b, s, e = (statistics.median(col) for col in zip(*rows))
            total = statistics.mean(f + b + s for f, b, s, _ in rows)
            print(f"{name:20s}: forward {1e3 * f:.1f} ms, backward {1e3 * b:.1f}, step {1e3 * s:.1f}, "
                  f"at the end of backward {1e3 * e:.1f}; forward + backward + step {1e3 * total:.1f} ms "
                  f"({1e3 * (total - plain):+.1f})", flush=True)
        probed = [max(p) for p in zip(*(i for _, _, i in everyone))]  # the slowest rank's, as the warm-up keeps
        print(f"the all-reduce alone, as the link's start-up probe times it (after a barrier, back to back, "
              f"nothing computed before it): {1e3 * statistics.median(probed):.1f} ms, median of {len(probed)} "
              f"probes", flush=True)
        for name in ends:
            print(f"{name:20s}: {spread([t[name] for t, _, _ in everyone])}", flush=True)
            if name in ("barrier", all_reduce):
                print(f"{'':20s}  {lined_up([m[name] for _, m, _ in everyone])}", flush=True)


def _ms(v: list[float]) -> str:
    return (f"median {1e3 * statistics.median(v):.1f} ms, mean {1e3 * statistics.mean(v):.1f}, "
            f"90th percentile {1e3 * statistics.quantiles(v, n=10)[-1]:.1f}")


def spread(by_rank: list[list[tuple]]) -> str:
    """How the ranks' forward + backward + step varied from iteration to iteration, and apart."""
    compute = [[f + b + s for f, b, s, _ in rows] for rows in by_rank]
    apart = [max(c) - min(c) for c in zip(*compute)]
    sd = ", ".join(f"{1e3 * statistics.stdev(c):.1f}" for c in compute)
    varied = len(compute) == 2 and all(len(set(c)) > 1 for c in compute)  # else no correlation to speak of
    corr = f", correlation {statistics.correlation(*compute):+.2f}" if varied else ""
    return f"compute per iteration: standard deviation by rank {sd} ms; slowest less fastest {_ms(apart)}{corr}"


def lined_up(by_rank: list[list[tuple[float, float]]]) -> str:
    """What a sync point at the end of backward cost: how far apart the ranks reached it, and how
    long it took once the last had."""
    rows = list(zip(*by_rank))
    apart = [max(a for a, _ in r) - min(a for a, _ in r) for r in rows]
    done = [max(d for _, d in r) - max(a for a, _ in r) for r in rows]
    return f"ranks reached it apart by {_ms(apart)}; done after the last: {_ms(done)} ({len(rows)} sync points)"


if __name__ == "__main__":
    main()
