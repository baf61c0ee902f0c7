"""The gsm8k family: worked steps, strict and flexible answers."""

from __future__ import annotations

import re

from mars.world.tasks import extract_answer, make_splits, score
from tests.world.tasks.helpers import by_family


def test_gsm8k_gold_steps_are_arithmetic():
    exs = make_splits(200, 50, seed=6)
    for x in by_family(exs[0] + exs[1], "gsm8k"):
        steps = re.findall(r"(\d+) ([-+*/]) (\d+) = (\d+)", x["response"])
        assert 2 <= len(steps) <= 3
        for a, op, b, c in steps:
            assert eval(f"{a} {op} {b}") == int(c)
        assert x["response"].endswith(f"\n#### {steps[-1][3]}")
        assert x["target"]["answer"] == steps[-1][3]


def test_gsm8k_strict_vs_flexible():
    assert score("gsm8k", "5 + 6 = 11. The answer is 11.", {"answer": "11"}) == {
        "exact_match": 0.0,
        "exact_match_flexible": 1.0,
    }
    assert score("gsm8k", "#### 11.0", {"answer": "11"})["exact_match"] == 1.0
    assert score("gsm8k", "####11\n\n", {"answer": "11"})["exact_match"] == 1.0
    assert score("gsm8k", "#### $1,100.", {"answer": "1100"}) == {"exact_match": 1.0, "exact_match_flexible": 1.0}
    assert score("gsm8k", "#### -3", {"answer": "-3"})["exact_match"] == 1.0
    assert score("gsm8k", "#### 11\nwait, 12", {"answer": "11"}) == {"exact_match": 1.0, "exact_match_flexible": 0.0}
    assert extract_answer("gsm8k", "no number here") is None
    assert score("gsm8k", "", {"answer": "11"}) == {"exact_match": 0.0, "exact_match_flexible": 0.0}
