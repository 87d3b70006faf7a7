"""``make bench``: every algorithm side by side in the paper's regime, interleaved and repeated.

Per repetition and model, one job (runners/bench_worker.py under torchrun,
``--nproc`` workers) runs a calibration segment, then every segment below in
one process group, interleaved one H-window at a time, in an order rotated by
one per repetition and per round (DreamDDP's overlap variant is set up right
after DreamDDP, whose schedule it reuses).  Emulated segments share one link whose all-reduce of all parameters
takes ``--ratio`` x the steady-state backward pass; the engine-overhead
segments run on the ideal link.  The first repetition also measures peak
tensor memory per algorithm (profiled segments, after the timed ones).  Then
runners/bench_report.py turns the run records into ``<out>/README.md``.

    python runners/bench.py                          # the committed benchmark (make bench)
    python runners/bench.py --quick --out /tmp/b     # a 2-worker smoke run of the whole pipeline

Models (``model.size=small`` and its recipe, data offline): GPT-2 on
Shakespeare, 4 x 64 tokens per worker; ResNet-18 on Fashion-MNIST, 16 images
per worker.
ASC-WFBP's and DeAR's buckets are DDP's 25 MB scaled by model size (as many
buckets as the paper-size model would have).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import bench_report

from dreamddp.atomic import write_json

MODELS = {
    "gpt2": {"overrides": ["model=gpt2", "model.size=small"],
             "bucket_mb": 0.175},  # 25 MB x 3.5 MB / 498 MB (GPT-2 124M): ~20 buckets
    "resnet18": {"overrides": ["model=resnet18", "model.size=small"],
                 "bucket_mb": 1.57},  # 25 MB x 2.8 MB / 44.7 MB (ResNet-18): 2 buckets
    # GPT-2 again with one worker per core (2 on this host): no time-slicing of cores, so
    # what synchronising every iteration costs on shared cores shows against the 4-worker job.
    "gpt2-2w": {"overrides": ["model=gpt2", "model.size=small"], "bucket_mb": 0.175, "nproc": 2},
}
QUICK = {"gpt2": ["model=gpt2", "model.size=tiny", "data.block_size=32", "train.batch_size=2"],
         "resnet18": ["model=resnet18", "model.size=tiny", "train.batch_size=4"]}


def segments(bucket_mb: float) -> list[dict]:
    """The timed segments on the emulated link, then the engine-overhead ones on the ideal link."""
    def seg(label, overrides, link="emulated", **kw):
        return {"label": label, "overrides": overrides, "link": link, **kw}

    buckets = f"algo.bucket_mb={bucket_mb}"
    return [
        seg("ssgd", ["algo=ssgd"]),
        seg("ascwfbp", ["algo=ascwfbp", buckets]),
        seg("dear", ["algo=dear", buckets]),
        seg("flsgd", ["algo=flsgd"]),
        seg("plsgd_enp", ["algo=plsgd_enp"]),
        seg("streaming_diloco", ["algo=streaming_diloco"]),
        seg("dreamddp", ["algo=dreamddp"]),
        seg("dreamddp+overlap", ["algo=dreamddp", "algo.overlap_forward=true"], schedule_from="dreamddp"),
        seg("dreamddp+general", ["algo=dreamddp", "algo.scheduler=general"]),
        seg("ddp@ideal", ["algo=ddp"], "ideal", memory=False),
        seg("ssgd@ideal", ["algo=ssgd"], "ideal", memory=False),
        seg("nosync@ideal", ["algo=nosync"], "ideal"),
        seg("plain@ideal", ["algo=plain"], "ideal"),
    ]


def rotated(segs: list[dict], r: int) -> list[dict]:
    """Rotate by ``r``, keeping each segment that reuses another's schedule right after it."""
    blocks: list[list[dict]] = []
    for s in segs:
        if s.get("schedule_from") and blocks and blocks[-1][-1]["label"] == s["schedule_from"]:
            blocks[-1].append(s)
        else:
            blocks.append([s])
    k = r % len(blocks)
    return [s for b in blocks[k:] + blocks[:k] for s in b]


def job(args, model: str, rep: int, out: str) -> float:
    overrides = QUICK[model.split("-")[0]] if args.quick else MODELS[model]["overrides"]
    nproc = min(args.nproc, MODELS[model].get("nproc", args.nproc))
    spec = {
        "out": out,
        "base": [*overrides, f"cluster.nproc={nproc}", f"algo.H={args.H}", "train.eval_every=0",
                 "train.progress=false", "wandb.mode=disabled", f"warmup.profile_iterations={args.profile_iterations}",
                 "data.eval_batches=2", f"seed={rep}", *args.set],
        "segments": rotated([s for s in segments(MODELS[model]["bucket_mb"]) if not args.only or s["label"] in args.only], rep),
        "ratio": args.ratio,
        "iterations": args.iterations,
        "chunk": args.H,  # iterations of one segment per turn when they are interleaved: one window
        "calibration_iterations": args.calibration_iterations,
        "memory": rep == 0,
        "memory_iterations": 4,
    }
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "spec.json"), "w") as f:
        json.dump(spec, f, indent=1)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(nproc),
           "--master-addr", "127.0.0.1", "--master-port", str(29400 + rep),
           os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench_worker.py"), os.path.join(out, "spec.json")]
    t0 = time.perf_counter()
    with open(os.path.join(out, "job.log"), "w") as log:
        code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
    if code != 0:
        raise SystemExit(f"bench: {model} repetition {rep} failed (exit {code}); see {out}/job.log")
    return time.perf_counter() - t0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    p.add_argument("--reps", type=int, default=3, help="repetitions (medians need >= 3)")
    p.add_argument("--nproc", type=int, default=4)
    p.add_argument("--H", type=int, default=10)
    p.add_argument("--ratio", type=float, default=7.0, help="comm (all-reduce of all parameters) / backward")
    p.add_argument("--iterations", type=int, default=55, help="per segment; the first 10%% are not timed")
    p.add_argument("--calibration-iterations", type=int, default=16)
    p.add_argument("--profile-iterations", type=int, default=5, help="DreamDDP's start-up profile")
    p.add_argument("--quick", action="store_true", help="tiny models, for a smoke run of the pipeline")
    p.add_argument("--only", nargs="+", metavar="LABEL", help="these segments only (e.g. flsgd dreamddp), to study a few")
    p.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="overrides for every segment")
    p.add_argument("--out", default="results/bench")
    args = p.parse_args(argv)
    if args.quick:
        args.nproc, args.iterations, args.calibration_iterations, args.profile_iterations = 2, 12, 6, 2
    runs = os.path.join(args.out, "runs")
    start = time.perf_counter()
    for rep in range(args.reps):
        for model in (args.models if rep % 2 == 0 else args.models[::-1]):
            took = job(args, model, rep, os.path.join(runs, model, f"rep{rep}"))
            print(f"bench: {model} repetition {rep}: {took:.0f} s", flush=True)
    write_json(os.path.join(runs, "bench.json"), {"args": vars(args), "seconds": time.perf_counter() - start})
    bench_report.write(runs, args.out)
    print(f"bench: {args.out}/README.md ({time.perf_counter() - start:.0f} s in all)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
