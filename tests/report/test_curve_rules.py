"""mars.report.curve_rules: the learning curve's declared rules on hand-made tables, against hand-computed answers."""

import math

import pandas as pd
import pytest

from mars.pipeline.config import ConfigError
from mars.report import curve_rules as R


def curve(rows):
    columns = ["model", "role", "example_passes", "change_fast_vs_tau1", "tpf_fast", "lossless_tpf_gsm8k"]
    return pd.DataFrame(rows, columns=columns)


START = ("ar_sft", "start", 3200, math.nan, math.nan, math.nan)


def test_the_stopping_rule_needs_both_rises_under_003():
    def table(tpf_4x, lossless_4x):
        return curve(
            [
                START,
                ("mars_x1", "mars", 3200, -3.0, 1.40, 1.40),
                ("mars_x2", "mars", 6400, -3.0, 1.80, 2.00),
                ("mars_x4", "mars", 12800, -3.0, tpf_4x, lossless_4x),
            ]
        )

    assert R.stops_after_4x(table(1.82, 2.02))  # +0.02, +0.02: flat
    assert not R.stops_after_4x(table(1.84, 2.02))  # +0.04 at tau 0.95
    assert not R.stops_after_4x(table(1.82, 2.05))  # +0.05 lossless
    assert not R.stops_after_4x(table(1.83, 2.02))  # +0.03 is not less than 0.03 (in floats, 0.0300000...)
    assert not R.stops_after_4x(table(1.82, 2.03))  # (2.03 - 2.00 is 0.0299999... in floats)
    with pytest.raises(ConfigError, match="both tokens per forward"):
        R.stops_after_4x(table(1.82, math.nan))  # 4x not yet decoded losslessly: no answer, not "go on"
    with pytest.raises(ConfigError, match="2x and 4x"):
        R.stops_after_4x(table(1.82, 2.02).iloc[:3])


def test_table5_takes_the_most_tokens_per_forward_within_15_points_else_the_best_lossless():
    rows = [
        START,
        ("mars_x1", "mars", 3200, -1.0, 1.40, 1.40),
        ("mars_x2", "mars", 6400, -1.5, 1.60, 1.90),  # exactly 1.5 points: within
        ("mars_x4", "mars", 12800, -2.0, 1.90, 2.10),  # most tokens, but 2 points lost
        ("mars_self_x2", "self_distilled", 6400, 0.5, 1.55, 2.30),
    ]
    assert R.table5_model(curve(rows)) == ("mars_x2", True)
    rows[2] = ("mars_x2", "mars", 6400, -1.6, 1.60, 1.90)
    rows[1] = ("mars_x1", "mars", 3200, -1.7, 1.40, 1.40)
    rows[4] = ("mars_self_x2", "self_distilled", 6400, -1.51, 1.55, 2.30)
    assert R.table5_model(curve(rows)) == ("mars_self_x2", False)  # none within: the most lossless tokens


def test_the_line_and_the_budget_it_reads_off():
    # tokens per forward 1.2, 1.5, 1.7, 2.2 at 1x, 2x, 4x, 8x of 3,200: x = log2 passes = 11.644 + (0, 1, 2, 3);
    # by hand, on k = 0..3: slope = sum((k - 1.5)(y - 1.65)) / sum((k - 1.5)^2) = 1.6 / 5 = 0.32, and the line
    # passes through (mean k 1.5, mean y 1.65), so it reaches 1.9 at k = 1.5 + 0.25 / 0.32 = 2.28125
    table = curve(
        [
            START,
            ("mars_x1", "mars", 3200, -3.0, 1.2, 1.2),
            ("mars_x2", "mars", 6400, -3.0, 1.5, 1.5),
            ("mars_x4", "mars", 12800, -3.0, 1.7, 1.7),
            ("mars_x8", "mars", 25600, -3.0, 2.2, 2.2),
            ("mars_self_x2", "self_distilled", 6400, -3.0, 5.0, 5.0),  # not a curve point: not on the line
        ]
    )
    slope, intercept = R.tpf_line(table)
    assert slope == pytest.approx(0.32)
    assert intercept == pytest.approx(1.65 - 0.32 * (math.log2(3200) + 1.5))
    assert R.passes_for(1.9, slope, intercept) == pytest.approx(3200 * 2**2.28125)
    assert R.passes_for(1.9, -0.1, 2.0) == math.inf  # a line that falls never gets there


def test_the_command_prints_the_rules_and_refuses_a_table_that_is_not_a_curve(tmp_path, capsys):
    good = tmp_path / "curve.csv"
    curve([START, ("mars_x1", "mars", 3200, -1.0, 1.4, 1.4), ("mars_x2", "mars", 6400, -1.0, 1.8, 2.0)]).to_csv(
        good, index=False
    )
    assert R.main([str(good), "--targets", "1.6"]) == 0
    out = capsys.readouterr().out
    # by hand: 0.4 per doubling from 1.4 at 3,200, so 1.6 at 3,200 * 2**0.5
    assert "Table 5 model: mars_x2 (by the rule)" in out and f"{3200 * 2**0.5:,.0f} example passes" in out
    assert "provisional: the table has the points 1x, 2x of 1x, 2x, 4x, 8x" in out and "line over 2 points" in out
    bad = tmp_path / "other.csv"
    pd.DataFrame({"model": ["a"], "avg": [1.0]}).to_csv(bad, index=False)
    assert R.main([str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "lacks change_fast_vs_tau1, example_passes" in err
