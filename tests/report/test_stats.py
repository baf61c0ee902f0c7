"""The tables' statistics, against numbers worked out by hand."""

import math

from mars.report.stats import item_paired_se


def test_item_paired_se_by_hand():
    # family 1: the three shared items differ by 1, 0, 0 (t/9 is in one evaluation only): variance 1/3, over 3 items
    # family 2: differences 1, 0: variance 1/2, over 2 items; the average of 2 families: 100 x sqrt(1/9 + 1/4) / 2
    a = [{"t/0": 1.0, "t/1": 0.0, "t/2": 1.0}, {"u/0": 1.0, "u/1": 1.0}]
    b = [{"t/0": 0.0, "t/1": 0.0, "t/2": 1.0, "t/9": 1.0}, {"u/0": 0.0, "u/1": 1.0}]
    assert math.isclose(item_paired_se(a, b), 100 * math.sqrt(13) / 12)
    assert item_paired_se(a, a) == 0.0
    # a family with fewer than two shared items has no variance: no standard error
    assert math.isnan(item_paired_se([{"t/0": 1.0}], [{"t/0": 0.0}]))
