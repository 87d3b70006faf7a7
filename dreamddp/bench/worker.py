"""One benchmark job's worker (``python -m torch.distributed.run ... -m dreamddp.bench.worker SPEC.json``).

Every segment is a complete dreamddp run (dreamddp.run.train.Run) with its own record under
``<out>/<label>/``; one process group runs them all, so every algorithm of a repetition has the same
processes, warm caches and link rate.  A calibration (nosync, ideal link) fixes the emulated rate
from its steady backward; the timed segments are then built, warmed up and trained interleaved,
``chunk`` iterations each in a rotating order with the others' link clocks paused, so every
algorithm samples the same slow and fast spells of a shared host (it drifts 20-30% over tens of
seconds, more than the differences measured); then the memory segments under torch's profiler.
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


def _set_up(run: Run) -> Run:
    run.build()
    run.set_up()
    return run


def _interleaved(ctx, segments: list[tuple[list[str], str]], chunk: int) -> None:
    """Build and warm up every segment, then train them ``chunk`` iterations at a time in turn."""
    runs, steps = [], []
    for overrides, run_dir in segments:
        runs.append(_set_up(_new_run(ctx, overrides, run_dir)))
        steps.append(runs[-1].steps())  # its link's clock stops here, while the next segments warm up
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
        _set_up(run).train()
    elif ctx.device.type == "cuda":
        run.recorder.set("memory", _cuda_peak_memory(run, ctx.device))
    else:  # every tensor of this segment is allocated under the profiler: model, state, activations
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
            _set_up(run)
            with torch.profiler.record_function(LOOP_MARK):
                run.train()
        run.recorder.set("memory", memory.loop_memory(prof, LOOP_MARK, every_thread))
    run.finish()
    dist.barrier()
    return run


def _cuda_peak_memory(run: Run, device) -> dict:
    """torch.cuda.max_memory_allocated over ``run``'s training loop, less what this process held
    before the segment began (the earlier segments are freed)."""
    gc.collect()
    torch.cuda.synchronize(device)
    base = torch.cuda.memory_allocated(device)
    _set_up(run)
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
    """The emulated rate at which all-reducing every parameter takes ``ratio`` x the steady backward
    (``gbps``), and the steady full-speed iteration (``iteration_s``).  On a mesh a rank's units are
    its shards and the ring the replicate group's, so the ratio means the same."""
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
            # the CPU allocator counts every thread from here on (it takes a lock per allocation)
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
