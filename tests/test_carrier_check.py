"""runners/carrier_check.py's summaries of every rank's marks: exact values on hand-made marks."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def carrier_check(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "runners"))
    return importlib.import_module("carrier_check")


def test_a_sync_point_is_timed_from_the_last_rank_to_reach_it(carrier_check):
    # (reached, done) per sync point; rank 1 late by 4 ms, then rank 0 late by 2 ms
    rank0 = [(1.000, 1.0050), (2.002, 2.0030), (3.000, 3.0010)]
    rank1 = [(1.004, 1.0045), (2.000, 2.0035), (3.001, 3.0020)]
    line = carrier_check.lined_up([rank0, rank1])
    # apart: 4, 2, 1 ms; done after the last: max(done) - max(reached) = 1.0, 1.5, 1.0 ms
    assert "apart by median 2.0 ms, mean 2.3" in line
    assert "done after the last: median 1.0 ms, mean 1.2" in line
    assert "(3 sync points)" in line


def test_the_ranks_compute_spread_is_per_iteration(carrier_check):
    # (forward, backward, step, end) per iteration: rank 0 computes 0.10, 0.12, 0.11 s; rank 1 0.11 s each time
    rank0 = [(0.03, 0.06, 0.01, 0.0), (0.04, 0.07, 0.01, 0.0), (0.03, 0.07, 0.01, 0.0)]
    rank1 = [(0.03, 0.07, 0.01, 0.0), (0.04, 0.06, 0.01, 0.0), (0.035, 0.065, 0.01, 0.0)]
    line = carrier_check.spread([rank0, rank1])
    # slowest less fastest: 10, 10, 0 ms; rank 0's standard deviation 10 ms, rank 1's 0 (so no correlation)
    assert "standard deviation by rank 10.0, 0.0 ms" in line
    assert "slowest less fastest median 10.0 ms, mean 6.7" in line
    assert "correlation" not in line
    rank1 = [(0.03, 0.06, 0.01, 0.0), (0.04, 0.06, 0.01, 0.0), (0.03, 0.07, 0.01, 0.0)]  # 0.10, 0.11, 0.11 s
    assert carrier_check.spread([rank0, rank1]).endswith("correlation +0.87")
