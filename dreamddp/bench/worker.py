"""One benchmark job's worker: several training runs ("segments") back to back in one process group.

Started by dreamddp-bench run (dreamddp/bench/jobs.py) under torchrun (``python -m torch.distributed.run
--nproc-per-node N dreamddp/bench/worker.py SPEC.json``).  Every segment is a
complete dreamddp run (dreamddp.run.train.Run: build, warm-up, loop, finish) with
its own composed config and its own run record under ``<out>/<label>/``, so the
results tools read them like any run.  Running them in one job gives every
algorithm of a repetition the same processes, the same warm caches and one
link rate, and pays the start-up (imports, rendezvous) once.

Order of a job: a calibration segment (``nosync`` on the ideal link) fixes the
emulated rate from its steady-state backward pass (the link's all-reduce of
all parameters takes ``ratio`` x backward); then the timed segments are built
and warmed up one after the other, and trained interleaved: ``chunk``
iterations (one H-window) of each in turn, in an order rotated every round,
with the link's clock of the others paused (dreamddp.run.train.Run.steps), so
every algorithm samples the same slow and fast spells of a shared host (its
speed drifts by 20-30% over tens of seconds here, more than the differences
being measured); then, if asked, memory segments, one after the other: the
same configs for a few iterations under torch's profiler, which records every
tensor allocation, so peak live bytes during training are known per worker and
per algorithm.
"""

from __future__ import annotations

import collections
import gc
import itertools
import json
import os
import sys

import torch
import torch.distributed as dist
from hydra import compose, initialize_config_dir

import dreamddp.config  # noqa: F401  (registers schema and resolvers)
from dreamddp.bench import memory
from dreamddp.bench.segments import calibration_overrides, segment_overrides, steady
from dreamddp.run import dist_env
from dreamddp.comm.cost import ring_factor
from dreamddp.config import CONFIG_NAME, conf_dir, validate
from dreamddp.run.recorder import recorder_for
from dreamddp.run.train import Run

LOOP_MARK = "dreamddp.bench.loop"  # profiler range around the training loop of a memory segment


def _compose(overrides: list[str]):
    with initialize_config_dir(config_dir=conf_dir(), version_base="1.3"):
        return compose(CONFIG_NAME, overrides=overrides)


def _new_run(ctx, overrides: list[str], run_dir: str) -> Run:
    cfg = _compose(overrides)
    if ctx.rank == 0:
        validate(cfg)
    return Run(cfg, ctx, run_dir, recorder_for(ctx.rank, cfg, run_dir))


def _interleaved(ctx, segments: list[tuple[list[str], str]], chunk: int) -> None:
    """Build and warm up every segment, then train them ``chunk`` iterations at a time in turn
    (each run's Run.steps: its link's clock stands still outside its own turns)."""
    runs, steps = [], []
    for overrides, run_dir in segments:
        run = _new_run(ctx, overrides, run_dir)
        run.build()
        run.set_up()
        runs.append(run)
        steps.append(run.steps())  # its clock stops here, while the next segments warm up
    total = max(r.cfg.train.iterations for r in runs)
    for k in range(-(-total // chunk)):  # rounds; the order rotated every round
        for turn in steps[k % len(steps):] + steps[:k % len(steps)]:
            dist.barrier()  # every turn starts with the ranks together
            collections.deque(itertools.islice(turn, chunk), maxlen=0)  # its next ``chunk`` iterations
    for run in runs:
        run.finish()
    dist.barrier()


def _run(ctx, overrides: list[str], run_dir: str, profile_memory: bool = False,
         every_thread: bool = False) -> Run:
    run = _new_run(ctx, overrides, run_dir)
    if not profile_memory:
        run.build()
        run.set_up()
        run.train()
    elif ctx.device.type == "cuda":
        run.recorder.set("memory", _cuda_peak_memory(run, ctx.device))
    else:  # every tensor of this segment is allocated under the profiler: model, state, activations
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
            run.build()
            run.set_up()
            with torch.profiler.record_function(LOOP_MARK):
                run.train()
        run.recorder.set("memory", memory.loop_memory(prof, LOOP_MARK, every_thread))
    run.finish()
    dist.barrier()
    return run


def _cuda_peak_memory(run: Run, device) -> dict:
    """Build, set up and train ``run``; torch.cuda.max_memory_allocated over its training loop,
    less what this process held before the segment began (the earlier segments are freed)."""
    gc.collect()
    torch.cuda.synchronize(device)
    base = torch.cuda.memory_allocated(device)
    run.build()
    run.set_up()
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device) - base
    torch.cuda.reset_peak_memory_stats(device)  # the peak of the training loop, not of the set-up passes
    run.train()
    torch.cuda.synchronize(device)
    return {"loop_start_bytes": before, "peak_bytes": torch.cuda.max_memory_allocated(device) - base,
            "held_before_bytes": base,
            "note": "torch.cuda.max_memory_allocated of this worker during the training loop, less the "
                    "bytes it held before the segment was built"}


def _calibrate(ctx, spec: dict) -> dict:
    """The emulated rate at which all-reducing every parameter takes ``ratio`` x the steady
    backward (``gbps``), and the steady full-speed iteration (``iteration_s``: a timed window's unit).
    On a mesh (``cluster.shards`` > 1) a rank syncs its local shards across the replicas: its
    units' bytes are the shards' and the ring is the replicate group's, so the ratio means the same."""
    run = _run(ctx, calibration_overrides(spec), os.path.join(spec["out"], "calibration"))
    rows = run.recorder.record.data["iterations"] if run.recorder.active else []
    measured = [steady(rows, k) for k in ("backward", "time")] if rows else [None, None]
    dist.broadcast_object_list(measured, src=0)
    backward, iteration = measured
    nbytes = sum(u.nbytes for u in run.units)
    gbps = ring_factor("all_reduce", run.comm.world_size) * nbytes * 8 / (spec["ratio"] * backward) / 1e9
    calibration = {"backward_s": backward, "iteration_s": iteration, "model_bytes": nbytes, "ratio": spec["ratio"],
                   "gbps": gbps}
    if ctx.rank == 0:
        with open(os.path.join(spec["out"], "calibration.json"), "w") as f:
            json.dump(calibration, f)
    return calibration


def main(spec_path: str) -> None:
    with open(spec_path) as f:
        spec = json.load(f)
    ctx = dist_env.init_distributed(_compose(spec["base"]))
    clean = False
    try:
        calibration = _calibrate(ctx, spec)

        def segment(seg, memory: bool) -> tuple[list[str], str]:
            return (segment_overrides(spec, seg, calibration, memory),
                    os.path.join(spec["out"], seg["label"] + ("@memory" if memory else "")))

        _interleaved(ctx, [segment(seg, False) for seg in spec["segments"]], spec["chunk"])
        gc.collect()
        if spec.get("memory"):
            # from here on the CPU allocator counts every thread (after the timed segments: it
            # takes a lock per allocation)
            every_thread = ctx.device.type == "cpu" and memory.count_every_thread()
            for seg in spec["segments"]:
                if seg.get("memory", True):
                    _run(ctx, *segment(seg, True), profile_memory=True, every_thread=every_thread)
                    gc.collect()
        clean = True
    finally:
        dist_env.shutdown(clean)  # after an error the peers are not at a barrier: do not wait for them


if __name__ == "__main__":
    main(sys.argv[1])
    dist_env.exit_worker(0)  # no interpreter finalization after a clean run (see exit_worker)
