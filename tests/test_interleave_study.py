"""runners/interleave_study.py's report, on two committed ``make bench`` jobs standing in for its own,
and ``runners/bench.py --chunk`` reaching the job's spec."""

from __future__ import annotations

import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from dreamddp.run.summary import warmup_cut

ROOT = Path(__file__).resolve().parents[1]
JOBS = ROOT / "results" / "bench" / "runs" / "gpt2"
COMPUTE_ONLY = ("nosync@ideal", "plain@ideal")


def _record(job: Path, label: str) -> dict:
    return json.loads((job / label / "run.json").read_text())


def _timed_backward(job: Path, label: str) -> list[float]:
    rows = _record(job, label)["iterations"]
    return [r["backward"] for r in rows[warmup_cut(len(rows)):]]


def test_report_reads_each_job_as_its_records_say(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "runners"))
    import bench_predict as bp
    from bench_segments import TIMED

    for chunk, rep in ((1, "rep0"), (10, "rep1")):
        place = tmp_path / f"chunk{chunk}" / "rep0" / "runs" / "gpt2"
        place.mkdir(parents=True)
        (place / "rep0").symlink_to(JOBS / rep)
    out = subprocess.run([sys.executable, str(ROOT / "runners" / "interleave_study.py"), "--reps", "1", "--report-only",
                          "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "WANDB_MODE": "disabled"})
    assert out.returncode == 0, out.stderr[-3000:]
    rows = {int(r["chunk"]): r for r in csv.DictReader((tmp_path / "interleave.csv").open())}
    for chunk, rep in ((1, "rep0"), (10, "rep1")):
        job, row = JOBS / rep, rows[chunk]
        nosync, plain = (statistics.fmean(_timed_backward(job, label)) for label in COMPUTE_ONLY)
        assert float(row["nosync_over_plain_backward"]) == pytest.approx(nosync / plain, rel=1e-9)
        reference = statistics.fmean(_timed_backward(job, COMPUTE_ONLY[0]) + _timed_backward(job, COMPUTE_ONLY[1]))
        algos = [label for label in TIMED if (job / label).is_dir() and label not in COMPUTE_ONLY]
        # less the engine's host work the predictions charge in backward (records since it was timed)
        segs = {d.name: {**_record(job, d.name), "_dir": str(d)} for d in job.iterdir() if (d / "run.json").is_file()}
        profile = bp.steady_profile(segs)
        stray = [abs((statistics.fmean(_timed_backward(job, label))
                      - bp.host_charged(segs[label], profile, ("backward",))) / reference - 1) for label in algos]
        assert int(row["algorithms"]) == len(algos)
        assert float(row["backward_stray_max"]) == pytest.approx(max(stray), rel=1e-9)
        assert float(row["backward_stray_mean"]) == pytest.approx(statistics.fmean(stray), rel=1e-9)
        assert 0 <= float(row["error_median"]) <= float(row["error_max"]) < 0.5
    readme = (tmp_path / "README.md").read_text()
    assert "| 1 | 1 |" in readme and "| 10 | 1 |" in readme  # one summary row per interleaving


def test_bench_chunk_reaches_the_jobs_spec(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "runners"))
    import bench

    assert bench.job_spec(bench.parse_args(["--chunk", "1"]), "gpt2", 0, "x")["chunk"] == 1
    assert bench.job_spec(bench.parse_args(["--H", "5"]), "gpt2", 0, "x")["chunk"] == 5  # default: one window
    with pytest.raises(SystemExit):
        bench.parse_args(["--chunk", "-1"])


def test_committed_report_is_what_its_records_give(tmp_path):
    committed = ROOT / "results" / "interleave"
    shutil.copytree(committed, tmp_path / "interleave", symlinks=True)
    out = subprocess.run([sys.executable, str(ROOT / "runners" / "interleave_study.py"), "--reps", "3", "--report-only",
                          "--out", str(tmp_path / "interleave")], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "WANDB_MODE": "disabled"})
    assert out.returncode == 0, out.stderr[-3000:]
    for name in ("README.md", "interleave.csv"):
        assert (tmp_path / "interleave" / name).read_text() == (committed / name).read_text(), name


def test_the_headline_interleaved_one_iteration_per_turn_regenerates(tmp_path, monkeypatch):
    """results/bench_chunk1: make bench's jobs with --chunk 1; its report says how it interleaved."""
    monkeypatch.syspath_prepend(str(ROOT / "runners"))
    import bench_report

    committed = ROOT / "results" / "bench_chunk1"
    bench_report.write(str(committed / "runs"), str(tmp_path))
    text = (tmp_path / "README.md").read_text()
    assert text == (committed / "README.md").read_text()
    assert "--chunk 1" in text and "interleaved one iteration at a time" in text
