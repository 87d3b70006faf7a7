"""A study part on the tc link: every run its own ``dreamddp-run`` job on real shaped links, beside its emulated twin.

Per model a calibration fixes the rate once: the nosync run's steady backward gives the ring model's
rate for the part's ``ratio``; a short S-SGD run on the shaped link measures its real wait / backward,
and the rate is scaled so that this is the part's ``ratio`` (the wait goes as 1 / rate).  Then every
repetition runs each run under tbf shaping, then on the emulated link at the same rate (unless the
part's regime says ``twins: false``); the compute-only runs once, on the ideal link, serving both trees.  Records: ``<out>/tc/runs/`` and
``<out>/emulated/runs/``, laid out as an interleaved job's.  Every run folder keeps the spec that made
it (spec.json), so ``--resume`` keeps only a folder of the same spec and code.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

from dreamddp.atomic import write_json
from dreamddp.bench import jobs
from dreamddp.bench.segments import FULL_SPEED, calibration_overrides, segment_overrides, steady
from dreamddp.comm.cost import ring_factor

LINKS = ("tc", "emulated")


def run_job(run_dir: Path, overrides: list[str]) -> dict:
    """One ``dreamddp-run`` job into ``run_dir`` (jobs.launch); its record."""
    code = jobs.launch(str(run_dir), run_spec(overrides), [
        sys.executable, "-m", "dreamddp.cli", *overrides, "train.progress=false", f"hydra.run.dir={run_dir}",
        "hydra.output_subdir=null", "hydra.job_logging.handlers.file.filename=/dev/null"])  # run.json has the config
    if code != 0:
        raise SystemExit(f"bench: {run_dir} failed (exit {code}); see {run_dir}/job.log")
    return json.loads((run_dir / "run.json").read_text())


def link_overrides(link: str, gbps: float) -> list[str]:
    return [f"bandwidth={'tc_1gbit' if link == 'tc' else '1gbit'}", f"bandwidth.gbps={gbps}"]


def uplink_overrides(part, gbps: float) -> list[str]:
    """The part's per-worker uplinks (``uplinks``: multiples of the calibrated rate) as worker_gbps."""
    if not part.regime.uplinks:
        return []
    return [f"bandwidth.worker_gbps=[{','.join(f'{gbps * u:.6g}' for u in part.regime.uplinks)}]"]


def calibrate(spec: dict, folder: Path, ratio: float) -> dict:
    """The rate at which S-SGD's exposed wait is ``ratio`` x its backward on the shaped link."""
    base = run_job(folder / "calibration", calibration_overrides(spec))
    backward = steady(base["iterations"], "backward")
    nbytes = 4 * sum(u["numel"] for u in base["extra"]["units"])
    first = ring_factor("all_reduce", base["extra"]["world_size"]) * nbytes * 8 / (ratio * backward) / 1e9
    probe = run_job(folder / "calibration_ssgd", spec["base"] + ["algo=ssgd", *FULL_SPEED, *link_overrides("tc", first),
                                                                 f"train.iterations={spec['calibration_iterations']}"])
    measured = probe["summary"]["mean_wait"] / probe["summary"]["mean_backward"]
    return {"backward_s": backward, "iteration_s": steady(base["iterations"], "time"), "model_bytes": nbytes,
            "ratio": ratio, "ring_gbps": first, "ssgd_ratio_at_ring_gbps": measured, "gbps": first * measured / ratio}


def run_spec(overrides: list[str]) -> dict:
    return {"overrides": list(overrides), "source": jobs.source_digest()}


def _state(folder: Path, want: dict, done: str, old: str) -> str | None:
    """None where ``folder`` was made by spec ``want`` and holds its ``done`` file; else why it must run."""
    if not folder.exists() or done == "calibration.json" and not (folder / done).is_file():
        return "not run before"
    try:
        why = jobs.spec_differs(json.loads((folder / "spec.json").read_text()), want)
    except (OSError, ValueError):
        return f"no spec.json (made before {old} kept theirs)"
    if why or done == "calibration.json":
        return why
    try:
        return None if json.loads((folder / done).read_text()).get("status") == "completed" else "did not complete"
    except (OSError, ValueError):
        return "no record"


def run_state(folder: Path, want: dict) -> str | None:
    return _state(folder, want, "run.json", "runs")


def calibration_state(folder: Path, spec: dict) -> str | None:
    return _state(folder, spec, "calibration.json", "calibrations")


def _calibration_spec(part, model, out: Path) -> dict:
    return jobs.job_spec(part, model, 0, str(out / "calibration" / model.name))  # its ratio: the rate's target


def _links(part) -> tuple[str, ...]:
    """The trees a part's runs go to: the tc link's, and its emulated twins' unless ``twins: false``."""
    return LINKS if part.regime.twins else LINKS[:1]


def _runs(part, model, rep: int, cal: dict):
    """(segment, link, overrides) of every run of ``model``'s repetition ``rep``, in running order."""
    spec = jobs.job_spec(part, model, rep, "")
    for seg in spec["segments"]:
        for link in (_links(part) if seg["link"] == "emulated" else LINKS[:1]):
            overrides = segment_overrides(spec, seg, cal)  # the emulated link at that rate
            if seg["link"] == "emulated" and link == "tc":
                overrides = [o for o in overrides if not o.startswith(("bandwidth=", "bandwidth.gbps="))]
                overrides += link_overrides("tc", cal["gbps"]) + uplink_overrides(part, cal["gbps"])
            yield seg, link, overrides


def run_separate(study, part, args, made) -> list[str]:
    """Every repetition of every model of ``part``; returns its runs folders (tc, and emulated with twins).
    ``made(study, part, args, seconds, path)``: what bench.json says made them."""
    out = Path(study.out) / part.out
    trees = {link: out / link / "runs" for link in _links(part)}
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
                name = f"bench: {model.name} repetition {rep} {seg['label']} ({link})"
                why = run_state(run_dir, run_spec(overrides)) if args.resume else "not resumed"
                if why is not None:
                    if args.resume:
                        print(f"{name}: runs again ({why})", flush=True)
                    took = time.perf_counter()
                    run_job(run_dir, overrides)
                    print(f"{name}: {time.perf_counter() - took:.0f} s", flush=True)
                if seg["link"] != "emulated" and "emulated" in trees:  # the compute-only runs serve both trees
                    twin = trees["emulated"] / model.name / f"rep{rep}" / seg["label"]
                    shutil.rmtree(twin, ignore_errors=True)
                    shutil.copytree(run_dir, twin)
    for tree in trees.values():
        write_json(tree / "bench.json", made(study, part, args, time.perf_counter() - start, tree / "bench.json"))
    return [str(t) for t in trees.values()]


def dry_run(study, part) -> list[str]:
    """Each model's calibration and every run of every repetition, and whether --resume keeps it."""
    out, lines = Path(study.out) / part.out, []
    for model in part.models:
        folder = out / "calibration" / model.name
        why = calibration_state(folder, _calibration_spec(part, model, out))
        lines.append(f"  {model.name} calibration -> {folder}: "
                     + ("--resume keeps it" if why is None else f"runs ({why})"))
        cal = json.loads((folder / "calibration.json").read_text()) if why is None else None
        for rep in range(part.reps):
            for seg, link, overrides in _runs(part, model, rep, cal or {"gbps": 1.0, "iteration_s": 0.1}):
                run_dir = out / link / "runs" / model.name / f"rep{rep}" / seg["label"]
                state = "runs (after its calibration)" if cal is None else \
                    ("--resume keeps it" if (w := run_state(run_dir, run_spec(overrides))) is None else f"runs ({w})")
                lines.append(f"    {model.name} rep{rep} {seg['label']} ({link}) -> {run_dir}: {state}")
    return lines
