"""``dreamddp-bench run <study>.yaml`` end to end on tiny models: the interleaved job, its records,
the report, the result card, and ``--resume`` keeping a completed job instead of running it again."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dist_util import free_port

ROOT = Path(__file__).resolve().parents[1]
SEGMENTS = ["flsgd", "dreamddp", "nosync@ideal", "ddp@ideal", "ascwfbp@ideal"]
MEMORY = ["flsgd", "dreamddp", "nosync@ideal"]  # the segments with a memory run


def study(folder: Path, H: int = 10) -> Path:
    """A study of SEGMENTS on GPT-2 (made tiny by --quick), one repetition."""
    path = folder.parent / f"{folder.name}_H{H}.yaml"
    path.write_text(f"about: the runner end to end\nmodels: {{gpt2: small}}\nruns: [{', '.join(SEGMENTS)}]\n"
                    f"regime: {{H: {H}}}\nreps: 1\nreport: [{{kind: bench}}]\n")
    return path


def bench(out: Path, *extra: str, H: int = 10) -> subprocess.CompletedProcess:
    # A fresh port each job: back to back on the default one, a job's store once found it still
    # taken (EADDRINUSE), as it is by any other job on this host.
    cmd = [sys.executable, "-m", "dreamddp.bench.cli", "run", str(study(out, H)), "--quick",
           "--out", str(out), "--port", str(free_port()), *extra]
    env = {**os.environ, "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.timeout(400)
@pytest.mark.slow  # a whole benchmark; the golden test checks its report, make run runs it
def test_quick_bench_writes_its_report_and_card_and_resume_keeps_the_completed_job(tmp_path):
    from dreamddp.bench import jobs as bench_module

    first = bench(tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    job = tmp_path / "runs" / "gpt2" / "rep0"
    for label in SEGMENTS + [s + "@memory" for s in MEMORY]:
        assert json.loads((job / label / "run.json").read_text())["status"] == "completed", label
    report = (tmp_path / "README.md").read_text()
    assert "| flsgd |" in report and "| dreamddp |" in report
    # the card: the timed runs (the ideal-link ones beside them are another regime), and its figure
    card = first.stdout.splitlines()
    assert any(line.startswith("flsgd ") for line in card) and any(line.startswith("dreamddp ") for line in card)
    assert not any(line.startswith(("nosync@ideal", "ddp@ideal", "calibration")) for line in card)
    assert (tmp_path / "loss_vs_time.png").stat().st_size > 0
    assert "ascwfbp / ddp" in report and "ascwfbp / ddp n/a" not in report  # the opt-in segment, named
    # the memory table says how its records measured (CPU: the allocator's total over every thread)
    assert "Peak live tensor memory per worker during training (rank 0's record: live torch tensor bytes" in report
    assert "c10's CPU allocator total over every thread; repetition 0)" in report

    stamp = (job / "dreamddp" / "run.json").stat().st_mtime_ns
    again = bench(tmp_path, "--resume")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "gpt2 repetition 0: completed before, kept" in again.stdout
    assert (job / "dreamddp" / "run.json").stat().st_mtime_ns == stamp  # not run again

    # A job that other code made (a digest of dreamddp/, conf/ and the worker in its spec) is not
    # the same job either.
    spec = json.loads((job / "spec.json").read_text())
    assert spec["source"] == bench_module.source_digest() and bench_module.job_done(spec)
    assert not bench_module.job_done({**spec, "source": "made-by-other-code"})
    # A job that ran the memory segments serves a spec without them, not the other way round.
    assert spec["memory"] and bench_module.job_done({**spec, "memory": False})
    (job / "spec.json").write_text(json.dumps({**spec, "memory": False}))
    assert not bench_module.job_done(spec)
    (job / "spec.json").write_text(json.dumps(spec))

    # A job whose spec changed is not the same job: --resume runs it, in a folder cleared of the
    # old job's records (a segment the new spec lacks must not mix into its report).
    (job / "stale").mkdir()
    (job / "stale" / "run.json").write_text(json.dumps({"status": "completed"}))
    changed = bench(tmp_path, "--resume", H=4)
    assert changed.returncode == 0, changed.stdout + changed.stderr
    assert "completed before" not in changed.stdout
    assert json.loads((job / "spec.json").read_text())["chunk"] == 4
    assert not (job / "stale").exists()

    # A subset without DreamDDP (--only flsgd nosync@ideal) still gets its report: ratios to
    # DreamDDP are n/a, not a crash.
    subset = report_without(tmp_path, tmp_path.parent / "subset", "dreamddp", "dreamddp@memory")
    assert "| flsgd |" in subset

    # The ideal-link segments alone (--only nosync@ideal plain@ideal: the engine's overhead) get a
    # report too.
    text = report_without(tmp_path.parent / "subset", tmp_path.parent / "overhead", "flsgd", "flsgd@memory")
    assert "No algorithm on the emulated link in this job" in text and "| flsgd |" not in text


def report_without(job_dir: Path, copy: Path, *labels: str) -> str:
    """The report ``dreamddp-bench report`` writes for a copy of ``job_dir`` without ``labels``' records."""
    shutil.copytree(job_dir, copy)
    for label in labels:
        shutil.rmtree(copy / "runs" / "gpt2" / "rep0" / label)
    report_only = subprocess.run([sys.executable, "-m", "dreamddp.bench.cli", "report", str(copy)], cwd=ROOT,
                                 capture_output=True, text=True, timeout=120)
    assert report_only.returncode == 0, report_only.stdout + report_only.stderr
    return (copy / "README.md").read_text()


@pytest.mark.parametrize("override,message", [
    # valid for the emulated segments, not for the ideal-link ones (the calibration run is the first)
    ("bandwidth.hold_core=true", "error: gpt2 calibration: bandwidth.hold_core=true: only a paced link"),
    ("model.n_layer=0", "error: gpt2 calibration: model.n_layer=0: must be >= 1"),
    ("trian.lr=1", "error: gpt2 calibration: trian.lr=1: the config has no key trian"),
    ("data=nope", "error: data=nope: unknown option; choose from cifar10, cifar100, fashion_mnist"),
])
def test_a_set_some_run_cannot_take_is_refused_before_any_job_starts(tmp_path, capsys, override, message):
    """Every run of every job is composed and validated before the first job starts: one line
    naming the model, the segment and the field (as dreamddp-run refuses: ``error: ``, status 2),
    no job folder, no worker started.  In this process: the refusal comes before any job would
    start one (a process per case cost more than the checks)."""
    from dreamddp.bench.cli import main

    out = tmp_path / "bench"
    with pytest.raises(SystemExit) as refused:
        main(["run", str(study(out)), "--quick", "--out", str(out), "--set", override])
    stderr = capsys.readouterr().err
    assert refused.value.code == 2
    assert stderr.strip() == next(line for line in stderr.splitlines() if line.startswith("error:"))
    assert stderr.strip().startswith(message), stderr
    assert not out.exists()
