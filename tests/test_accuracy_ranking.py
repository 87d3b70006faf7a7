"""The bookkeeping of ``dreamddp-bench accuracy``, not the simulator's accuracy itself (that is
measured by the command and checked run by run in test_predicted_vs_measured.py): its ranking
measures (dreamddp/reports/accuracy_measures.py), exact on hand-made rows, per configuration, by
pairs of runs and over the repetitions' medians (how the study goes round its ratios:
test_studies.py)."""

from __future__ import annotations

import pytest


@pytest.fixture()
def measures():
    from dreamddp.reports import accuracy_measures

    return accuracy_measures


def row(algorithm: str, rep: int, measured: float, predicted: float, backward_x: float = 1.0) -> dict:
    return {"model": "m", "ratio": 7.0, "rep": rep, "algorithm": algorithm, "measured_s": measured,
            "predicted_s": predicted, "backward_x_reference": backward_x}


def rows() -> list[dict]:
    return [
        # rep 0: a < b < c measured; b and c predicted the other way round, 1% apart: a tie
        row("a", 0, 1.00, 1.00), row("b", 0, 1.50, 1.60), row("c", 0, 1.515, 1.55),
        # rep 1: a and c swapped, measured 10% apart: c, the slower, computed 8% slow
        row("a", 1, 1.00, 1.20), row("b", 1, 1.50, 1.60), row("c", 1, 1.10, 1.00, backward_x=1.08),
        # rep 2: all right
        row("a", 2, 1.02, 1.00), row("b", 2, 1.40, 1.50), row("c", 2, 1.60, 1.70),
    ]


def test_a_configuration_is_right_only_with_no_pair_swapped(measures):
    ranks = measures.ranking(rows())
    assert [(r["rep"], r["right"], r["right_but_ties"]) for r in ranks] == [(0, False, True), (1, False, False),
                                                                             (2, True, True)]
    assert ranks[0]["swapped"] == ["b < c by 1.0%"]
    assert ranks[1]["swapped"] == ["a < c by 10.0%"]  # a measured faster, predicted slower


def test_the_order_over_repetitions_takes_each_algorithms_medians(measures):
    (over,) = measures.median_ranking(rows())
    # medians measured a 1.00, b 1.50, c 1.515; predicted a 1.00, b 1.60, c 1.55: b and c swapped, 1% apart
    assert (over["reps"], over["right"], over["right_but_ties"]) == (3, False, True)
    assert over["swapped"] == ["b < c by 1.0%"]
    assert measures.median_ranking([r for r in rows() if r["rep"] == 0]) == []  # one repetition: nothing to pool


def test_the_order_over_repetitions_ignores_how_fast_the_host_ran_each_one(measures):
    # Repetition 1 run in an hour 1.7x slower, every time in it (measured and predicted) scaled:
    # the medians are taken over each job's own scale, so the verdict is the same
    slow = [{**r, "measured_s": 1.7 * r["measured_s"], "predicted_s": 1.7 * r["predicted_s"]} if r["rep"] == 1 else r
            for r in rows()]
    (over,) = measures.median_ranking(slow)
    assert (over["right"], over["right_but_ties"], over["swapped"]) == (False, True, ["b < c by 1.0%"])
    assert measures.median_ranking(slow) == measures.median_ranking(rows())
