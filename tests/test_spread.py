"""The median-and-spread every report prints (dreamddp/reports/spread.py)."""

from dreamddp.reports.spread import fmt_spread, median_spread


def test_median_spread_skips_missing_values():
    assert median_spread([3.0, None, 1.0, 2.0]) == (2.0, 1.0, 3.0)
    assert median_spread([None]) is None and median_spread([]) is None


def test_fmt_spread():
    assert fmt_spread((1.2344, 1.0, 1.5)) == "1.234 (1.000-1.500)"
    assert fmt_spread((1.2344, 1.0, 1.5), 1) == "1.2 (1.0-1.5)"
    assert fmt_spread(None) == "n/a"
