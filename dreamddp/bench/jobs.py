"""A benchmark job: one repetition of one model in one part of a study, ``dreamddp.bench.worker`` under torchrun.

Its spec (``spec.json``: the runs' command lines and a digest of the code) is what ``--resume``
compares: a folder made by another spec or other code is run again.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

from dreamddp.atomic import write_json
from dreamddp.study import DEFAULT_ITERATIONS, ModelEntry, Part
from dreamddp.provenance import source_digest


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


def job_spec(part: Part, model: ModelEntry, rep: int, out: str) -> dict:
    """The job of ``model``'s repetition ``rep`` in ``part``, writing to ``out``."""
    r = part.regime
    return {
        "out": out,
        "base": [*model.overrides, f"cluster.nproc={r.nproc}", f"algo.H={r.H}", "train.eval_every=0",
                 "train.progress=false", "wandb.mode=disabled", f"warmup.profile_iterations={r.profile_iterations}",
                 "data.eval_batches=2", f"seed={rep}", *r.set],
        "segments": rotated([run.segment(model.bucket_mb) for run in part.runs], rep),
        "ratio": float(r.ratio),
        "latency_ms": float(r.latency_ms),
        "iterations": r.iterations or model.iterations or DEFAULT_ITERATIONS,
        "chunk": r.chunk or r.H,  # iterations of one segment per turn when they are interleaved
        "calibration_iterations": r.calibration_iterations,
        "memory": rep == 0 and r.memory,
        "memory_iterations": 4,
        "source": source_digest(),
    }


def spec_differs(made: dict, want: dict) -> str | None:
    """Why a job made with spec ``made`` is not the job of ``want`` (None: it is); one that also
    ran the memory runs serves a spec without them."""
    want = json.loads(json.dumps(want))
    if made.get("source") != want.get("source"):
        return f"made by other code (source digest {made.get('source')}, now {want.get('source')})"
    if want.get("memory") and not made.get("memory"):
        return "ran without the memory runs"
    keys = sorted(k for k in {*made, *want} - {"memory"} if made.get(k) != want.get(k))
    return f"spec differs in {', '.join(keys)}" if keys else None


def _read(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def job_state(spec: dict) -> str | None:
    """None where ``spec``'s job ran to the end in its folder (the same spec and code, every record
    completed, the memory ones too where it has them); else why it must run."""
    out = spec["out"]
    try:
        why = spec_differs(_read(os.path.join(out, "spec.json")), spec)
    except (OSError, ValueError):
        return "not run before" if not os.path.isdir(out) else "no spec.json"
    if why:
        return why
    labels = [s["label"] for s in spec["segments"]]
    if spec["memory"]:
        labels += [s["label"] + "@memory" for s in spec["segments"] if s.get("memory", True)]
    for label in labels:
        try:
            if _read(os.path.join(out, label, "run.json")).get("status") != "completed":
                return f"{label} did not complete"
        except (OSError, ValueError):
            return f"{label} has no record"
    return None


def job_done(spec: dict) -> bool:
    return job_state(spec) is None


def launch(out: str, spec: dict, cmd: list[str]) -> int:
    """``cmd`` run in the emptied folder ``out`` (another job's records must not mix in), beside its spec
    (spec.json) and its log (job.log); its exit status."""
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    write_json(os.path.join(out, "spec.json"), spec)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1"}
    with open(os.path.join(out, "job.log"), "w") as log:
        return subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env).returncode


def job(spec: dict, nproc: int, rep: int, port: int = 29400) -> float:
    """Run the job of ``spec``; its seconds."""
    out, t0 = spec["out"], time.perf_counter()
    code = launch(out, spec, [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node",
                              str(nproc), "--master-addr", "127.0.0.1", "--master-port", str(port + rep),
                              "-m", "dreamddp.bench.worker", os.path.join(out, "spec.json")])
    if code != 0:
        raise SystemExit(f"bench: repetition {rep} failed (exit {code}); see {out}/job.log")
    return time.perf_counter() - t0
