"""A study part on the tc link (``regime: {link: tc}``): every algorithm as its own job on real shaped links, beside
its emulated twin at the same rate.

Per model: a calibration fixes the rate once, then every repetition runs each segment as its
own ``dreamddp-run`` job, first under the kernel's tbf shaping (``bandwidth.backend=tc``: one
network namespace per worker, gloo moving the bytes while the workers compute, no virtual
clock and no deferral), then on the emulated link at the same rate; the segments in an order
rotated by one per repetition (A B C, B C A, ...).  The compute-only runs (nosync, plain) run
once per repetition on the ideal link and serve both trees.

The rate: the nosync calibration run's steady backward gives the rate at which an all-reduce
of every parameter would take the part's ``ratio`` x backward under the ring model; a short S-SGD run
on the shaped link then measures its exposed wait over its backward there, and the rate is
scaled so that this ratio is the part's ``ratio`` on the real link (its wait goes as 1 / rate).

Records: ``<out>/tc/runs/`` and ``<out>/emulated/runs/``, each laid out as an interleaved
job's (``runs/<model>/rep<k>/<segment>/run.json``), so ``dreamddp-bench report`` reads either;
``<out>/README.md`` (tc_report.py) sets them side by side.

Provenance: every run folder (and each model's calibration folder) keeps the spec that made it
(``spec.json``: its command line, or the calibration's job spec, and the code's digest), so
``--resume`` keeps only a folder made by the same spec and code and runs the rest again, saying
which and why; a run's folder is emptied before it runs, so records never mix.
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
from dreamddp.bench import jobs
from dreamddp.bench.segments import calibration_overrides, segment_overrides, steady
from dreamddp.comm.cost import ring_factor

LINKS = ("tc", "emulated")


def run_job(run_dir: Path, overrides: list[str]) -> dict:
    """One ``dreamddp-run`` job into ``run_dir`` (its output kept there as job.log, its spec as
    spec.json); its record."""
    if run_dir.exists():  # a job cut short, or another spec's, must not leave its records behind
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    write_json(run_dir / "spec.json", run_spec(overrides))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "dreamddp.cli", *overrides, "train.progress=false", f"hydra.run.dir={run_dir}",
           "hydra.output_subdir=null", "hydra.job_logging.handlers.file.filename=/dev/null"]  # run.json has the config; job.log the log
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


def run_spec(overrides: list[str]) -> dict:
    return {"overrides": list(overrides), "source": jobs.source_digest()}


def run_state(folder: Path, want: dict) -> str | None:
    """None where ``folder`` holds a completed run made by spec ``want``; else why it must run."""
    try:
        made = json.loads((folder / "spec.json").read_text())
    except (OSError, ValueError):
        return "not run before" if not folder.exists() else "no spec.json (made before runs kept theirs)"
    why = jobs.spec_differs(made, want)
    if why:
        return why
    try:
        return None if json.loads((folder / "run.json").read_text()).get("status") == "completed" else "did not complete"
    except (OSError, ValueError):
        return "no record"


def calibration_state(folder: Path, spec: dict) -> str | None:
    """None where ``folder`` holds a calibration made by ``spec`` (and the same code)."""
    if not (folder / "calibration.json").is_file():
        return "not run before"
    try:
        made = json.loads((folder / "spec.json").read_text())
    except (OSError, ValueError):
        return "no spec.json (made before calibrations kept theirs)"
    return jobs.spec_differs(made, spec)


def _calibration_spec(part, model, out: Path) -> dict:
    return jobs.job_spec(part, model, 0, str(out / "calibration" / model.name))  # its ratio: the rate's target


def _runs(part, model, rep: int, cal: dict):
    """(label, link, overrides) of every run of ``model``'s repetition ``rep``, in running order."""
    spec = jobs.job_spec(part, model, rep, "")
    for seg in spec["segments"]:
        for link in (LINKS if seg["link"] == "emulated" else LINKS[:1]):
            overrides = segment_overrides(spec, seg, cal)  # the emulated link at that rate
            if seg["link"] == "emulated" and link == "tc":
                overrides = [o for o in overrides if not o.startswith(("bandwidth=", "bandwidth.gbps="))]
                overrides += link_overrides("tc", cal["gbps"])
            yield seg, link, overrides


def run_separate(study, part, args, made) -> list[str]:
    """Every repetition of every model of ``part``; returns the two runs folders (tc, emulated).
    ``made(study, part, args, seconds)``: what bench.json says made them."""
    out = Path(study.out) / part.out
    trees = {link: out / link / "runs" for link in LINKS}
    start = time.perf_counter()
    for model in part.models:
        cal_spec = _calibration_spec(part, model, out)
        folder = out / "calibration" / model.name
        why = calibration_state(folder, cal_spec) if args.resume else "not resumed"
        if why is None:
            cal = json.loads((folder / "calibration.json").read_text())
        else:
            if args.resume:
                print(f"bench: {model.name} calibration: runs again ({why})", flush=True)
            shutil.rmtree(folder, ignore_errors=True)
            cal = calibrate(cal_spec, folder, part.regime.ratio)
            write_json(folder / "calibration.json", cal)
            write_json(folder / "spec.json", cal_spec)  # last: a calibration cut short has none
        print(f"bench: {model.name}: {1e3 * cal['gbps']:.4g} Mbit/s (S-SGD's comm/backward "
              f"{cal['ssgd_ratio_at_ring_gbps']:.2f} at the ring model's {1e3 * cal['ring_gbps']:.4g})", flush=True)
        for rep in range(part.reps):
            for tree in trees.values():
                write_json(tree / model.name / f"rep{rep}" / "calibration.json", cal)
            for seg, link, overrides in _runs(part, model, rep, cal):
                run_dir = trees[link] / model.name / f"rep{rep}" / seg["label"]
                why = run_state(run_dir, run_spec(overrides)) if args.resume else "not resumed"
                if why is not None:
                    if args.resume:
                        print(f"bench: {model.name} repetition {rep} {seg['label']} ({link}): runs again ({why})",
                              flush=True)
                    took = time.perf_counter()
                    run_job(run_dir, overrides)
                    print(f"bench: {model.name} repetition {rep} {seg['label']} ({link}): "
                          f"{time.perf_counter() - took:.0f} s", flush=True)
                if seg["link"] != "emulated":  # the compute-only runs serve both trees
                    twin = trees["emulated"] / model.name / f"rep{rep}" / seg["label"]
                    shutil.rmtree(twin, ignore_errors=True)
                    shutil.copytree(run_dir, twin)
    for tree in trees.values():
        write_json(tree / "bench.json", made(study, part, args, time.perf_counter() - start))
    return [str(t) for t in trees.values()]


def dry_run(study, part) -> list[str]:
    """Each model's calibration and every run of every repetition, and whether --resume keeps it."""
    out, lines = Path(study.out) / part.out, []
    for model in part.models:
        folder = out / "calibration" / model.name
        why = calibration_state(folder, _calibration_spec(part, model, out))
        lines.append(f"  {model.name} calibration -> {folder}: " + ("--resume keeps it" if why is None else f"runs ({why})"))
        cal = json.loads((folder / "calibration.json").read_text()) if why is None else None
        for rep in range(part.reps):
            for seg, link, overrides in _runs(part, model, rep, cal or {"gbps": 1.0, "iteration_s": 0.1}):
                run_dir = out / link / "runs" / model.name / f"rep{rep}" / seg["label"]
                state = "runs (after its calibration)" if cal is None else \
                    ("--resume keeps it" if (w := run_state(run_dir, run_spec(overrides))) is None else f"runs ({w})")
                lines.append(f"    {model.name} rep{rep} {seg['label']} ({link}) -> {run_dir}: {state}")
    return lines
