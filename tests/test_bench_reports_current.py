"""Every committed benchmark report is what the current report code writes from its committed records.

A change to runners/bench_report.py (a new column, a reason split further) otherwise leaves the
study folders under results/ describing their runs in an older report's words, with nothing
saying so.  results/gpu has its own test (tests/test_gpu_tools.py).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
FOLDERS = sorted(p.parent for p in [*RESULTS.glob("*/bench.csv"), *RESULTS.glob("*/*/bench.csv")]
                 if (p.parent / "runs").is_dir() and p.parent.parent.name != "gpu")


def test_the_study_folders_are_found():
    assert RESULTS / "bench" in FOLDERS and len(FOLDERS) > 10


@pytest.mark.parametrize("folder", FOLDERS, ids=[str(f.relative_to(RESULTS)) for f in FOLDERS])
def test_a_committed_benchmark_report_regenerates_from_its_records(tmp_path, monkeypatch, folder):
    monkeypatch.syspath_prepend(str(ROOT / "runners"))
    bench_report = importlib.import_module("bench_report")
    bench_report.write(str(folder / "runs"), str(tmp_path))
    for name in ("README.md", "bench.csv"):
        assert (tmp_path / name).read_text() == (folder / name).read_text(), (
            f"{folder.relative_to(ROOT)}/{name} is stale: python runners/bench_report.py {folder.relative_to(ROOT)}")
