"""dreamddp-bench report on a study's folder of benchmark folders (make bench-latency's
<dir>/<ms>ms): each folder's report, then one table whose rows are each folder's medians."""

from __future__ import annotations

import csv
import json
import shutil
import statistics
from pathlib import Path

from dreamddp.reports import bench as report
from dreamddp.reports import rebuild

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "bench_small" / "runs"


def test_a_study_report_has_each_settings_medians_and_ratios_in_its_rows(tmp_path):
    for name in ("10ms", "0ms"):
        shutil.copytree(FIXTURE, tmp_path / "study" / name / "runs")
    assert rebuild.main([str(tmp_path / "study")]) == 0
    with open(tmp_path / "study" / "study.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["setting"] for r in rows][0] == "0ms" and {r["setting"] for r in rows} == {"0ms", "10ms"}
    reps = report.load(str(FIXTURE))["gpt2"]
    for r in rows:
        mine = [s[r["algorithm"]] for s in reps.values() if r["algorithm"] in s]
        assert float(r["iteration_s"]) == statistics.median(x.mean_iteration for x in mine)
        ratios = [s[r["algorithm"]].mean_iteration / s["dreamddp"].mean_iteration for s in reps.values()]
        assert float(r["x_dreamddp"]) == statistics.median(ratios)
    assert (tmp_path / "study" / "0ms" / "README.md").is_file()


def test_a_study_with_an_equal_setting_gives_each_rows_time_over_the_same_algorithms_there(tmp_path):
    for name in ("equal", "slow", "slowhost"):
        shutil.copytree(FIXTURE, tmp_path / "study" / name / "runs")
    for cal in (tmp_path / "study" / "slowhost" / "runs").glob("*/rep*/calibration.json"):
        made = json.loads(cal.read_text())  # the same times on a host whose backward was twice as slow
        cal.write_text(json.dumps({**made, "backward_s": 2 * made["backward_s"]}))
    assert rebuild.main([str(tmp_path / "study")]) == 0
    with open(tmp_path / "study" / "study.csv") as f:
        rows = list(csv.DictReader(f))
    reps = report.load(str(FIXTURE))["gpt2"]
    for r in rows:
        # the same records: the same time; the same seconds on a host half as fast: half the time
        assert float(r["x_equal"]) == (0.5 if r["setting"] == "slowhost" else 1.0)
        mine = [s[r["algorithm"]] for s in reps.values() if r["algorithm"] in s]
        apriori = [x.predicted_mean / x.mean_iteration for x in mine if x.predicted_mean]
        assert (float(r["apriori_over_measured"]) == statistics.median(apriori)) if apriori \
            else r["apriori_over_measured"] == ""
