"""The reports' one golden test: the committed fixture records of a tiny benchmark job
(tests/fixtures/bench_small/runs: GPT-2 tiny, S-SGD, FLSGD, DreamDDP and the compute-only runs,
two repetitions, made by ``dreamddp-bench run --quick --reps 2 --models gpt2 --only ssgd flsgd
dreamddp nosync@ideal plain@ideal --no-memory``) give exactly the committed bench.csv and result
card.  Only numbers are compared, not the reports' prose.  After an intended change to what a
report computes, ``make fixtures`` remakes both; review their diff."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dreamddp.reports import bench as report
from dreamddp.reports.card import records_of, render, write_card_csv
from dreamddp.reports.collect import collect
from dreamddp.schedule.compare import reference_root

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "bench_small"


def _have_reference() -> bool:
    try:
        return reference_root().is_dir()
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not _have_reference(), reason="the paper column needs the authors' profiles (../shared)")
def test_the_benchmark_csv_of_the_fixture_records_is_exact(tmp_path):
    shutil.copytree(FIXTURE / "runs", tmp_path / "runs")
    report.write(str(tmp_path / "runs"), str(tmp_path))
    assert (tmp_path / "bench.csv").read_text() == (FIXTURE / "bench.csv").read_text()


def test_the_card_of_the_fixture_records_is_exact(tmp_path):
    runs = records_of(collect([FIXTURE / "runs"]))
    assert render(runs) == (FIXTURE / "card.txt").read_text()
    write_card_csv(runs, tmp_path / "card.csv")
    assert (tmp_path / "card.csv").read_text() == (FIXTURE / "card.csv").read_text()
