"""``dreamddp-bench run --link tc``: every algorithm as its own job on real shaped links, beside
its emulated twin at the same rate.

Per model: a calibration fixes the rate once, then every repetition runs each segment as its
own ``dreamddp-run`` job, first under the kernel's tbf shaping (``bandwidth.backend=tc``: one
network namespace per worker, gloo moving the bytes while the workers compute, no virtual
clock and no deferral), then on the emulated link at the same rate; the segments in an order
rotated by one per repetition (A B C, B C A, ...).  The compute-only runs (nosync, plain) run
once per repetition on the ideal link and serve both trees.

The rate: the nosync calibration run's steady backward gives the rate at which an all-reduce
of every parameter would take ``--ratio`` x backward under the ring model; a short S-SGD run
on the shaped link then measures its exposed wait over its backward there, and the rate is
scaled so that this ratio is ``--ratio`` on the real link (its wait goes as 1 / rate).

Records: ``<out>/tc/runs/`` and ``<out>/emulated/runs/``, each laid out as an interleaved
job's (``runs/<model>/rep<k>/<segment>/run.json``), so ``dreamddp-bench report`` reads either;
``<out>/README.md`` (tc_report.py) sets them side by side.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from dreamddp.atomic import write_json
from dreamddp.reports.predict import COMPUTE_ONLY
from dreamddp.bench.segments import TIMED, calibration_overrides, segment_overrides, segments, steady
from dreamddp.comm.cost import ring_factor

LINKS = ("tc", "emulated")


def run_job(run_dir: Path, overrides: list[str]) -> dict:
    """One ``dreamddp-run`` job into ``run_dir`` (its output kept there as job.log); its record."""
    if run_dir.exists():  # a job cut short must not leave its records behind
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "dreamddp.cli", *overrides, "train.progress=false", f"hydra.run.dir={run_dir}"]
    with open(run_dir / "job.log", "w") as log:
        code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
    if code != 0:
        raise SystemExit(f"bench: {run_dir} failed (exit {code}); see {run_dir}/job.log")
    return json.loads((run_dir / "run.json").read_text())


def link_overrides(link: str, gbps: float) -> list[str]:
    preset = "tc_1gbit" if link == "tc" else "1gbit"
    return [f"bandwidth={preset}", f"bandwidth.gbps={gbps}"]


def calibrate(spec: dict, folder: Path, ratio: float) -> dict:
    """The rate at which S-SGD's exposed wait is ``ratio`` x its backward on the shaped link."""
    base = run_job(folder / "calibration", calibration_overrides(spec))
    backward = steady(base["iterations"], "backward")
    nbytes = 4 * sum(u["numel"] for u in base["extra"]["units"])
    world = base["extra"]["world_size"]
    first = ring_factor("all_reduce", world) * nbytes * 8 / (ratio * backward) / 1e9
    probe = run_job(folder / "calibration_ssgd",
                    spec["base"] + ["algo=ssgd", *link_overrides("tc", first),
                                    f"train.iterations={spec['calibration_iterations']}"])
    measured = probe["summary"]["mean_wait"] / probe["summary"]["mean_backward"]
    return {"backward_s": backward, "iteration_s": steady(base["iterations"], "time"), "model_bytes": nbytes,
            "ratio": ratio, "ring_gbps": first,
            "ssgd_ratio_at_ring_gbps": measured, "gbps": first * measured / ratio}


def run_separate(args, spec_of) -> list[str]:
    """Every repetition of every model; returns the two runs folders (tc, emulated)."""
    out = Path(args.out)
    trees = {link: out / link / "runs" for link in LINKS}
    start = time.perf_counter()
    for model in args.models:
        spec = spec_of(args, model, 0, str(out / "calibration" / model))
        cal_file = out / "calibration" / model / "calibration.json"
        if args.resume and cal_file.is_file():
            cal = json.loads(cal_file.read_text())
        else:
            cal = calibrate(spec, cal_file.parent, args.ratio)
            write_json(cal_file, cal)
        print(f"bench: {model}: {1e3 * cal['gbps']:.4g} Mbit/s (S-SGD's comm/backward "
              f"{cal['ssgd_ratio_at_ring_gbps']:.2f} at the ring model's {1e3 * cal['ring_gbps']:.4g})", flush=True)
        for rep in range(args.reps):
            spec = spec_of(args, model, rep, "")
            for tree in trees.values():
                write_json(tree / model / f"rep{rep}" / "calibration.json", cal)
            for seg in spec["segments"]:
                for link in (LINKS if seg["link"] == "emulated" else LINKS[:1]):
                    folder = trees[link] / model / f"rep{rep}" / seg["label"]
                    if args.resume and _completed(folder):
                        continue
                    overrides = segment_overrides(spec, seg, cal)  # the emulated link at that rate
                    if seg["link"] == "emulated" and link == "tc":
                        overrides = [o for o in overrides if not o.startswith(("bandwidth=", "bandwidth.gbps="))]
                        overrides += link_overrides("tc", cal["gbps"])
                    took = time.perf_counter()
                    run_job(folder, overrides)
                    print(f"bench: {model} repetition {rep} {seg['label']} ({link}): "
                          f"{time.perf_counter() - took:.0f} s", flush=True)
                if seg["link"] != "emulated":  # the compute-only runs serve both trees
                    twin = trees["emulated"] / model / f"rep{rep}" / seg["label"]
                    shutil.rmtree(twin, ignore_errors=True)
                    shutil.copytree(trees["tc"] / model / f"rep{rep}" / seg["label"], twin)
    made = {"args": {**vars(args)}, "seconds": time.perf_counter() - start}
    for tree in trees.values():
        write_json(tree / "bench.json", made)
    return [str(t) for t in trees.values()]


def _completed(folder: Path) -> bool:
    try:
        return json.loads((folder / "run.json").read_text()).get("status") == "completed"
    except (OSError, ValueError):
        return False


def default_labels() -> list[str]:
    """The timed segments a default benchmark runs, and the compute-only runs."""
    return [s["label"] for s in segments(1.0) if s["label"] in TIMED and not s.get("opt_in")] + list(COMPUTE_ONLY)
