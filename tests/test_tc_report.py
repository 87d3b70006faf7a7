"""The tc study's (runners/tc.yaml) side-by-side table and a-priori accuracy (dreamddp/reports/tc.py),
exact on hand-made records; its option checks."""

from __future__ import annotations

import pytest

from dreamddp.reports import tc as tc_report
from dreamddp.reports.records import Record


def rec(seconds: float, wait: float = 0.0, predicted: float | None = None) -> Record:
    rows = [{"time": seconds, "wait": wait, "forward": 0.0, "backward": 0.0}] * 10
    summary = {"mean_iteration_time": seconds, "bytes_per_iteration": 2**20}
    if predicted:
        summary["predicted"] = {"mean_iteration_time": predicted}
    return Record.of({"iterations": rows, "summary": summary})


def test_ratios_are_taken_inside_each_repetition_on_each_link():
    tc = {"m": {0: {"flsgd": rec(0.30, 0.1), "dreamddp": rec(0.20)}, 1: {"flsgd": rec(0.40, 0.3), "dreamddp": rec(0.25)}}}
    em = {"m": {0: {"flsgd": rec(0.25), "dreamddp": rec(0.20)}, 1: {"flsgd": rec(0.32), "dreamddp": rec(0.20)}}}
    rows = {r["algorithm"]: r for r in tc_report.rows(tc, em, "m")}
    assert list(rows) == ["flsgd", "dreamddp"]
    f = rows["flsgd"]
    assert f["tc_over_emulated"] == pytest.approx((1.225, 1.2, 1.25))  # 0.30/0.25 and 0.40/0.32
    assert f["tc_x_dreamddp"] == pytest.approx((1.55, 1.5, 1.6)) and f["emulated_x_dreamddp"] == pytest.approx((1.425, 1.25, 1.6))
    assert f["tc_wait_ms"] == pytest.approx((200.0, 100.0, 300.0)) and f["wire_mib"] == pytest.approx((1, 1, 1))
    assert rows["dreamddp"]["tc_x_flsgd"] == pytest.approx(((0.2 / 0.3 + 0.25 / 0.4) / 2, 0.625, 2 / 3))


def test_the_a_priori_error_is_each_runs_own_prediction_over_its_measurement():
    tc = {"m": {0: {"ssgd": rec(1.0, predicted=0.9), "flsgd": rec(0.5), "nosync@ideal": rec(0.1, predicted=0.1)}}}
    (row,) = tc_report.apriori(tc)  # a run without a prediction, and the compute-only ones, are not rows
    assert (row["algorithm"], row["error"]) == ("ssgd", pytest.approx(-0.1))


def test_the_tc_study_runs_each_algorithm_alone_and_latency_stays_off_the_ideal_link(tmp_path):
    from dreamddp.bench import study_run
    from dreamddp.bench.segments import segment_overrides
    from dreamddp.study import RUNNERS, load

    (part,) = load(RUNNERS / "tc.yaml").parts
    labels = [r.label for r in part.runs]
    assert part.regime.link == "tc" and "nosync@ideal" in labels and "ddp@ideal" not in labels and "dreamddp" in labels
    path = tmp_path / "s.yaml"
    path.write_text("about: x\nmodels: {gpt2: small}\nruns: [dreamddp, nosync@ideal]\nregime: {latency_ms: 10}\n")
    study = study_run.select(load(path), study_run.parse_args([str(path)]))
    spec = study_run.job_list(study, study.parts[0], [0])[0][2]
    paced, ideal = (segment_overrides(spec, s, {"gbps": 0.1}) for s in sorted(spec["segments"], key=lambda s: s["link"]))
    assert "bandwidth.latency_ms=10.0" in paced and not any(o.startswith("bandwidth.latency") for o in ideal)
