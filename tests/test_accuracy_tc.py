"""runners/accuracy_tc.yaml's report: each tc run's a-priori error is its own summary.predicted
against its measured mean, the runs without a prediction are left out, and every run is named by
its part (its setting)."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

from dreamddp.reports import accuracy_tc

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "bench_small" / "runs"


def _parts(tmp_path, *names):
    """A study's part folders, each the fixture's runs as its tc runs and a calibration for ratio 7."""
    parts = [tmp_path / "study" / name for name in names]
    for bench in parts:
        shutil.copytree(FIXTURE, bench / "tc" / "runs")
        (bench / "calibration" / "gpt2").mkdir(parents=True)
        (bench / "calibration" / "gpt2" / "calibration.json").write_text(json.dumps({"ratio": 7.0}))
    return parts


def test_the_apriori_error_is_each_runs_own_prediction_over_its_measurement(tmp_path):
    parts = _parts(tmp_path, "equal", "rank1x0.5")
    accuracy_tc.write([str(p) for p in parts], str(tmp_path / "out"))
    with open(tmp_path / "out" / "accuracy.csv") as f:
        rows = list(csv.DictReader(f))
    assert {r["setting"] for r in rows} == {"equal", "rank1x0.5"}
    rows = [r for r in rows if r["setting"] == "equal"]
    bench = parts[0]
    expected = {}
    for run in sorted((bench / "tc" / "runs" / "gpt2").glob("rep*/*/run.json")):
        summary = json.loads(run.read_text())["summary"]
        if (summary.get("predicted") or {}).get("mean_iteration_time"):
            expected[(run.parent.parent.name, run.parent.name)] = (
                summary["predicted"]["mean_iteration_time"] / summary["mean_iteration_time"] - 1)
    got = {(f"rep{r['rep']}" if not str(r["rep"]).startswith("rep") else r["rep"], r["algorithm"]):
           float(r["apriori_error"]) for r in rows}
    assert expected and got.keys() == expected.keys()
    for key, error in expected.items():
        assert abs(got[key] - error) < 1e-12, key


def test_a_part_without_its_bench_json_is_left_out_and_named_with_its_runs_so_far(tmp_path):
    """A part still running (or cut short) writes its bench.json only when it ends."""
    parts = _parts(tmp_path, "equal", "spells")
    (parts[1] / "tc" / "runs" / "bench.json").unlink()
    accuracy_tc.write([str(p) for p in parts], str(tmp_path / "out"))
    with open(tmp_path / "out" / "accuracy.csv") as f:
        assert {r["setting"] for r in csv.DictReader(f)} == {"equal"}
    runs = len(list((parts[1] / "tc" / "runs").glob("*/rep*/*/run.json")))
    assert f"spells ({runs} runs so far)" in (tmp_path / "out" / "README.md").read_text()
