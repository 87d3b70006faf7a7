"""``dreamddp-bench run``: algorithms side by side, interleaved and repeated, on one shared link.

Per repetition and model, one job (``dreamddp.bench.worker`` under torchrun,
``--nproc`` workers, one per core by default) runs a calibration run, then
every segment (one algorithm's run, dreamddp/bench/segments.py) in one process
group, interleaved one H-window at a time, in an order rotated by one per
repetition and per round.  The timed segments share one emulated link whose
all-reduce of all parameters takes ``--ratio`` x the calibrated steady
backward pass; the engine-overhead segments run on the ideal link.  The first
repetition also measures peak tensor memory per algorithm (unless
``--no-memory``).  Then dreamddp/reports/bench.py writes ``<out>/README.md`` and
``bench.csv``, and the result card (dreamddp/reports/card.py) is printed.
Before the first job starts every run of every job is composed and validated
(``check_configs``): a ``--set`` one segment cannot take is refused in one line.

    dreamddp-bench run --preset quickstart                # make run: S-SGD, FLSGD, DreamDDP, GPT-2 small
    dreamddp-bench run --preset headline                  # make bench
    dreamddp-bench run --models resnet18 --only flsgd dreamddp nosync@ideal plain@ideal
    dreamddp-bench run --resume                           # keep the completed jobs of an interrupted run

Presets (``--preset``, MODELS): ``quickstart`` is GPT-2's CPU-sized preset with
three algorithms and one repetition; ``compute`` is each model's
``model.size=compute``, whose forward / backward / optimizer split on one CPU
core looks like the paper model's on a GPU (conf/model/*.yaml); ``headline`` is
make bench's: the compute models at the batch sizes MODELS gives; ``small`` is
the CPU-sized preset, where per-op overhead dominates; ``paper`` is the paper
models at their sizes, for a GPU (``--set cluster.device=cuda``).  GPT-2 and
Llama on Shakespeare, ResNets on Fashion-MNIST.  ASC-WFBP's and DeAR's buckets
are DDP's 25 MB scaled by model size (as many buckets as the paper-size model
would have).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from dreamddp.atomic import write_json
from dreamddp.reports.predict import COMPUTE_ONLY
from dreamddp.bench.segments import OPT_IN, SCHEDULE_FROM, calibration_overrides, segment_overrides, segments

# Per model and preset: its overrides, its bucket size (DDP's 25 MB x model bytes / paper
# model bytes; GPT-2 124M: 498 MB; ResNet-18: 44.7 MB; Llama-2 (the authors' 176M): 706 MB;
# ResNet-50: 94.7 MB) and its iterations per segment where --iterations does not say (else
# ITERATIONS).  The first 10% are not timed (dreamddp.run.summary.warmup_cut), so 22, 33 and 44
# time 20, 30 and 40: every position of an H=10 window equally often (a window's iterations
# differ in exposed wait).
ITERATIONS = 44
COMPUTE = {
    "gpt2": {"overrides": ["model=gpt2", "model.size=compute"], "bucket_mb": 0.78},  # 15.5 MB model
    "resnet18": {"overrides": ["model=resnet18", "model.size=compute"], "bucket_mb": 9.8},  # 17.5 MB
    "llama2": {"overrides": ["model=llama2", "model.size=compute"], "bucket_mb": 1.57},  # 44.4 MB
    "resnet50": {"overrides": ["model=resnet50", "model.size=compute"], "bucket_mb": 13.9},  # 52.8 MB
}


def _at_batch(model: str, batch: int, iterations: int) -> dict:
    """The compute preset of ``model`` at another batch per worker and iteration count."""
    spec = COMPUTE[model]
    return {**spec, "overrides": [*spec["overrides"], f"train.batch_size={batch}"], "iterations": iterations}


MODELS = {
    "compute": COMPUTE,
    # make bench's two jobs, sized to fit its budget on 2 cores: at larger batches per worker the
    # fixed cost per iteration (host work, the ranks' skew) weighs less (docs/findings.md).
    "headline": {"gpt2": _at_batch("gpt2", 12, 22), "resnet18": _at_batch("resnet18", 32, 33)},
    # The paper models at the paper's sizes, for a GPU (--set cluster.device=cuda): buckets of
    # DDP's own 25 MB.
    "paper": {
        "gpt2": {"overrides": ["model=gpt2", "model.size=paper"], "bucket_mb": 25.0},
        "resnet18": {"overrides": ["model=resnet18", "model.size=paper"], "bucket_mb": 25.0},
        "llama2": {"overrides": ["model=llama2", "model.size=paper"], "bucket_mb": 25.0},
        "resnet50": {"overrides": ["model=resnet50", "model.size=paper"], "bucket_mb": 25.0},
    },
    "small": {
        "gpt2": {"overrides": ["model=gpt2", "model.size=small"], "bucket_mb": 0.175},  # 3.5 MB: ~20 buckets
        "resnet18": {"overrides": ["model=resnet18", "model.size=small"], "bucket_mb": 1.57},  # 2.8 MB: 2 buckets
    },
    # make run's: the CPU-sized GPT-2, three algorithms, one repetition (PRESET_DEFAULTS)
    "quickstart": {
        "gpt2": {"overrides": ["model=gpt2", "model.size=small"], "bucket_mb": 0.175, "iterations": 44},
    },
}
# What a preset sets where the command line does not say (a flag given wins).
PRESET_DEFAULTS = {"quickstart": {"models": ["gpt2"], "only": ["ssgd", "flsgd", "dreamddp"], "reps": 1,
                                  "no_memory": True}}
DEFAULT_MODELS = ("gpt2", "resnet18")
QUICK = {"gpt2": ["model=gpt2", "model.size=tiny", "data.block_size=32", "train.batch_size=2"],
         "resnet18": ["model=resnet18", "model.size=tiny", "train.batch_size=4"]}


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


@functools.cache
def source_digest() -> str:
    """A digest of the code a job runs (the package less this package's report modules, and the
    config tree), committed or not: a job that other code made is not the same job, so
    ``--resume`` runs it again.  The reports are left out: they are remade from the records
    every time."""
    from dreamddp.config import conf_dir

    package, conf, digest = Path(__file__).resolve().parents[1], Path(conf_dir()), hashlib.sha256()
    bench = Path(__file__).resolve().parent
    paths = [p for p in package.rglob("*.py") if p.parent != bench or p.stem in JOB_MODULES]
    for root, found in ((package, paths), (conf, list(conf.rglob("*.yaml")))):
        for path in sorted(found):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


JOB_MODULES = ("jobs", "worker", "segments", "memory")  # what a job runs; the rest of bench/ reads records


def job_spec(args, model: str, rep: int, out: str) -> dict:
    overrides = QUICK[model] if args.quick else MODELS[args.preset][model]["overrides"]
    nproc = args.nproc
    return {
        "out": out,
        "base": [*overrides, f"cluster.nproc={nproc}", f"algo.H={args.H}", "train.eval_every=0",
                 "train.progress=false", "wandb.mode=disabled", f"warmup.profile_iterations={args.profile_iterations}",
                 "data.eval_batches=2", f"seed={rep}", *args.set],
        "segments": rotated([s for s in segments(MODELS[args.preset][model]["bucket_mb"])
                             if (s["label"] in args.only if args.only else not s.get("opt_in"))], rep),
        "ratio": args.ratio,
        "latency_ms": args.latency_ms,
        "iterations": MODELS[args.preset][model].get("iterations", ITERATIONS) if args.iterations is None else args.iterations,
        "chunk": args.chunk or args.H,  # iterations of one segment per turn when they are interleaved
        "calibration_iterations": args.calibration_iterations,
        "memory": rep == 0 and not args.no_memory,
        "memory_iterations": 4,
        "source": source_digest(),
    }


def job_done(spec: dict) -> bool:
    """Whether ``spec``'s job already ran to the end in its folder: the same spec, and every
    segment's record (and, in the memory repetition, every memory record) completed.  A job
    that also ran the memory segments serves a spec without them (``--resume --no-memory``
    after a first call with memory keeps that repetition)."""
    out = spec["out"]
    try:
        with open(os.path.join(out, "spec.json")) as f:
            made = json.load(f)
        want = json.loads(json.dumps(spec))
        if {**made, "memory": None} != {**want, "memory": None} or (want["memory"] and not made["memory"]):
            return False
        labels = [s["label"] for s in spec["segments"]]
        if spec["memory"]:
            labels += [s["label"] + "@memory" for s in spec["segments"] if s.get("memory", True)]
        for label in labels:
            with open(os.path.join(out, label, "run.json")) as f:
                if json.load(f).get("status") != "completed":
                    return False
    except (OSError, ValueError):
        return False
    return True


def job(spec: dict, nproc: int, rep: int, port: int = 29400) -> float:
    out = spec["out"]
    if os.path.isdir(out):  # another job's records (another spec, or cut short) must not mix into this one's
        shutil.rmtree(out)
    os.makedirs(out)
    write_json(os.path.join(out, "spec.json"), spec)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(nproc),
           "--master-addr", "127.0.0.1", "--master-port", str(port + rep),
           "-m", "dreamddp.bench.worker", os.path.join(out, "spec.json")]
    t0 = time.perf_counter()
    with open(os.path.join(out, "job.log"), "w") as log:
        code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
    if code != 0:
        raise SystemExit(f"bench: repetition {rep} failed (exit {code}); see {out}/job.log")
    return time.perf_counter() - t0


def parse_args(argv=None, prog: str = "dreamddp-bench run") -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="compute", choices=list(MODELS),
                   help="which size of each model, and the preset's defaults (module docstring)")
    p.add_argument("--models", nargs="+", default=None, choices=list(MODELS["compute"]),
                   help=f"default: the preset's models that are among {', '.join(DEFAULT_MODELS)}")
    p.add_argument("--reps", type=int, default=None, help="repetitions (medians need >= 3; default 3)")
    p.add_argument("--nproc", type=int, default=2, help="workers (one per core measures the paper's regime)")
    p.add_argument("--H", type=int, default=10)
    p.add_argument("--chunk", type=int, default=0,
                   help="iterations of one segment per turn of the interleaving (default 0: one H-window)")
    p.add_argument("--ratio", type=float, default=7.0, help="comm (all-reduce of all parameters) / backward")
    p.add_argument("--latency-ms", type=float, default=0.0,
                   help="the emulated link's latency per ring hop, on top of its rate (bandwidth.latency_ms)")
    p.add_argument("--link", default="emulated", choices=("emulated", "tc"),
                   help="emulated: one job per repetition, its runs interleaved on one emulated link; tc: every "
                        "algorithm its own job on real shaped links, beside its emulated twin (separate.py)")
    p.add_argument("--iterations", type=int, default=None,
                   help=f"per segment (default: each model's in MODELS, else {ITERATIONS}); the first 10%% are not timed")
    p.add_argument("--calibration-iterations", type=int, default=16)
    p.add_argument("--profile-iterations", type=int, default=5, help="DreamDDP's start-up profile")
    p.add_argument("--port", type=int, default=29400, help="rendezvous port of repetition 0 (k: + k)")
    p.add_argument("--no-memory", action="store_true", default=None,
                   help="no memory segments (else in the first repetition)")
    p.add_argument("--quick", action="store_true", help="tiny models, for a smoke run of the pipeline")
    p.add_argument("--only", nargs="+", metavar="LABEL",
                   help="these segments only (e.g. flsgd dreamddp), to study a few; "
                        f"opt-in ones ({', '.join(sorted(OPT_IN))}) run only when named here")
    p.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="overrides for every segment")
    p.add_argument("--out", default=None, help="default: outputs/bench/<preset>")
    p.add_argument("--resume", action="store_true",
                   help="keep the jobs already completed in --out with the same spec and code; run the rest")
    args = p.parse_args(argv)
    preset = PRESET_DEFAULTS.get(args.preset, {})
    for key, default in (("models", [m for m in DEFAULT_MODELS if m in MODELS[args.preset]]), ("reps", 3),
                         ("no_memory", False), ("only", None)):
        if getattr(args, key) is None:
            setattr(args, key, preset.get(key, default))
    args.out = args.out or os.path.join("outputs", "bench", args.preset)
    if args.chunk < 0:
        p.error(f"--chunk {args.chunk}: must be >= 1 (or 0: one H-window)")
    if args.latency_ms < 0:
        p.error(f"--latency-ms {args.latency_ms:g}: must be >= 0")
    if args.latency_ms and args.link == "tc":
        p.error("--latency-ms: the tc link has no latency here (tbf shapes the rate only); use --link emulated")
    if args.reps < 1:
        p.error(f"--reps {args.reps}: must be >= 1")
    unknown = [m for m in args.models if m not in MODELS[args.preset]]
    if unknown:
        p.error(f"--models {unknown[0]}: no {args.preset} preset (have {', '.join(MODELS[args.preset])})")
    labels = {s["label"] for s in segments(1.0)}
    bad = [label for label in args.only or () if label not in labels]
    if bad:
        p.error(f"--only {bad[0]}: no such segment (have {', '.join(sorted(labels))})")
    if args.quick:
        args.nproc, args.iterations, args.calibration_iterations, args.profile_iterations = 2, 12, 6, 2
    if args.link == "tc" and args.only is None:  # each run is its own job: the engine-overhead pairs stay out
        from dreamddp.bench.separate import default_labels

        args.only = default_labels()
    orphan = [label for label in args.only or () if SCHEDULE_FROM.get(label, label) not in args.only]
    if orphan:
        source = SCHEDULE_FROM[orphan[0]]
        p.error(f"--only {orphan[0]}: runs on {source}'s schedule, so name {source} too")
    if args.only and not set(args.only) & set(COMPUTE_ONLY) and "only" not in preset:
        # bounds and predictions are made from the compute-only runs' steady state
        print(f"bench: --only without {' or '.join(COMPUTE_ONLY)}: the report will have no bounds or predictions",
              file=sys.stderr)
    return args


STAND_IN = {"gbps": 1.0, "iteration_s": 0.1}  # a calibration's fields, any valid values (check_configs)


def check_configs(args: argparse.Namespace) -> None:
    """Compose and validate every run of every job before any starts, with ``dreamddp-run``'s checks
    and its refusal (``error: <one line>``, status 2): a ``--set`` one segment cannot run with
    (``bandwidth.hold_core=true`` on the ideal-link ones) is refused here naming the model, the
    segment and the field, not in a job's log after its start-up.  The emulated rate is the
    calibration's, known only in the job (any valid one stands in); a schedule written by another
    segment's run is not there yet."""
    from dreamddp.checks import refuse
    from dreamddp.cli import check_group_options
    from dreamddp.config import CONFIG_NAME, ConfigError, conf_dir, validate
    from dreamddp.config.overrides import compose_checked
    from dreamddp.bench.separate import link_overrides

    check_group_options(list(args.set), conf_dir())  # data=nope: refused with the options there are
    for model in args.models:
        spec = job_spec(args, model, 0, os.path.join(args.out, "runs", model, "rep0"))
        runs = [("calibration", calibration_overrides(spec))]
        runs += [(seg["label"], segment_overrides(spec, seg, STAND_IN, schedule=False)) for seg in spec["segments"]]
        if args.link == "tc":  # the shaped twin of every run on a link (its host checks: root, tbf)
            runs += [(f"{seg['label']} (tc)", [o for o in segment_overrides(spec, seg, STAND_IN, schedule=False)
                                               if not o.startswith(("bandwidth=", "bandwidth.gbps="))]
                      + link_overrides("tc", 1.0)) for seg in spec["segments"] if seg["link"] == "emulated"]
        for label, overrides in runs:
            try:
                validate(compose_checked(conf_dir(), CONFIG_NAME, overrides))
            except ConfigError as exc:
                refuse(f"{model} {label}: {exc}")


def run_jobs(args: argparse.Namespace, reps: Iterable[int] | None = None) -> str:
    """Every repetition of every model (models alternate order per repetition), or only ``reps``
    of them; returns the runs folder."""
    runs = os.path.join(args.out, "runs")
    start = time.perf_counter()
    for rep in range(args.reps) if reps is None else reps:
        for model in (args.models if rep % 2 == 0 else args.models[::-1]):
            spec = job_spec(args, model, rep, os.path.join(runs, model, f"rep{rep}"))
            if args.resume and job_done(spec):
                print(f"bench: {model} repetition {rep}: completed before, kept", flush=True)
                continue
            took = job(spec, args.nproc, rep, args.port)
            print(f"bench: {model} repetition {rep}: {took:.0f} s", flush=True)
    write_json(os.path.join(runs, "bench.json"), {"args": vars(args), "seconds": time.perf_counter() - start})
    return runs


def main(argv=None) -> int:
    from dreamddp.reports import write_report
    from dreamddp.reports.card import print_card

    args = parse_args(argv)
    start = time.perf_counter()
    check_configs(args)
    if args.link == "tc":
        from dreamddp.bench import separate

        runs = separate.run_separate(args, job_spec)[0]  # the card: the real link's runs
        write_report("tc", args.out, [args.out])
    else:
        runs = run_jobs(args)
        write_report("bench", args.out, [args.out])
    print_card([runs])
    print(f"bench: {args.out}/README.md ({time.perf_counter() - start:.0f} s in all)")
    return 0
