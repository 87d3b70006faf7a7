"""dreamddp-bench card: a method's time and wire bytes at one ratio beside its quality, each taken
against DreamDDP's inside one repetition (one seed) before the median."""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

from dreamddp.reports import bench as report
from dreamddp.reports import methods as methods_card

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "bench_small"


def test_the_card_pairs_each_method_with_dreamddp_inside_each_repetition(tmp_path):
    out = tmp_path / "card"
    claims = tmp_path / "study.yaml"
    claims.write_text("claims:\n  flsgd: one average per H steps\n")
    assert methods_card.main([str(FIXTURE), str(FIXTURE), "--out", str(out), "--claims", str(claims)]) == 0
    assert (out / "README.md").is_file()
    with open(out / "card.csv") as f:
        rows = {r["method"]: r for r in csv.DictReader(f)}
    reps = report.load(str(FIXTURE / "runs"))["gpt2"]
    assert float(rows["dreamddp"]["wire_x_dreamddp"]) == 1.0 and float(rows["dreamddp"]["train_minus_dreamddp"]) == 0.0
    for label, row in rows.items():
        pairs = [s for s in reps.values() if label in s and "dreamddp" in s]
        wire = [s[label].wire_per_iteration() / s["dreamddp"].wire_per_iteration() for s in pairs]
        train = [s[label].final_loss() - s["dreamddp"].final_loss() for s in pairs]
        assert float(row["wire_x_dreamddp"]) == statistics.median(wire)
        assert float(row["train_minus_dreamddp"]) == statistics.median(train)
        assert row["claim"] == ("one average per H steps" if label == "flsgd" else "")
