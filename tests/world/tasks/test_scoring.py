"""Scoring through the registry: gold answers score 1, wrong and garbage answers 0, unknown families raise."""

from __future__ import annotations

import pytest

from mars.world.tasks import FAMILIES, extract_answer, few_shot_examples, ifeval, score
from tests.world.tasks.helpers import N_TEST, N_TRAIN, by_family

# ----------------------------------------------------------- gold correctness


def test_gold_scores_one_everywhere(splits, fake_sandbox):
    train, test = splits
    for x in train + test:
        metrics = score(x["family"], x["response"], x["target"])
        assert metrics and all(v == 1.0 for k, v in metrics.items() if k not in ("inst_passed", "inst_total")), (
            x["family"],
            x["prompt"],
            x["response"],
            metrics,
        )
        if x["family"] == "ifeval":
            assert metrics["inst_passed"] == metrics["inst_total"] == len(x["target"]["instruction_id_list"])
    assert len(fake_sandbox) == N_TRAIN + N_TEST  # every humaneval gold went through the runner


def test_gold_with_trailing_whitespace(splits, fake_sandbox):
    train, test = splits
    for x in test:
        padded = "  " + x["response"] + " \n\n" if x["family"] != "humaneval" else x["response"] + "\n\n"
        metrics = score(x["family"], padded, x["target"])
        assert metrics[next(iter(metrics))] == 1.0, (x["family"], padded)


# ------------------------------------------------------ incorrect / edge cases


def test_incorrect_answers_score_zero(fake_sandbox):
    assert score("bbh", "Let's think step by step. So the answer is True.", {"answer": "False"}) == {"exact_match": 0.0}
    assert score("bbh", "So the answer is 14.", {"answer": "41"})["exact_match"] == 0.0
    assert score("bbh", "So the answer is cup sun pig.", {"answer": "cup pig sun"})["exact_match"] == 0.0
    assert score("mmlu_pro", "The zorp is red. The answer is (B).", {"answer": "D"})["exact_match"] == 0.0
    assert score("gpqa", "The answer is (A).", {"answer": "C"})["exact_match"] == 0.0
    assert score("gsm8k", "5 + 6 = 12.\n#### 12", {"answer": "11"}) == {"exact_match": 0.0, "exact_match_flexible": 0.0}
    tgt = {
        "entry_point": "add_three",
        "test": "def check(candidate):\n    assert candidate(1) == 4\n\n\ncheck(add_three)\n",
    }
    assert score("humaneval", "```python\ndef add_three(x):\n    return x + 2\n```", tgt) == {"pass@1": 0.0}
    assert score("humaneval", "```python\ndef add_three(x):\n    return x + 3\n```", tgt) == {"pass@1": 1.0}
    m = score("ifeval", "Cats are soft.", {"instruction_id_list": [ifeval.I_UPPER], "kwargs": [{}]})
    assert m == {"prompt_level_strict_acc": 0.0, "inst_level_strict_acc": 0.0, "inst_passed": 0.0, "inst_total": 1.0}


def test_garbage_never_raises(splits, fake_sandbox):
    _, test = splits
    garbage = [
        "",
        " ",
        "\n\n",
        "asdf qwer",
        "####",
        "answer is",
        "```",
        "```python\n",
        "((((",
        "\x00\x01",
        "The answer is (",
        "#### abc",
        "* \n* \n",
        '"',
        None,
    ]
    for fam in FAMILIES:
        x = by_family(test, fam)[0]
        for g in garbage:
            metrics = score(fam, g, x["target"])
            assert all(v == 0.0 for k, v in metrics.items() if k != "inst_total"), (fam, g, metrics)
            extract_answer(fam, g)


def test_unknown_family_raises():
    with pytest.raises(ValueError):
        score("mmlu", "x", {"answer": "A"})
    with pytest.raises(ValueError):
        extract_answer("nope", "x")
    with pytest.raises(ValueError):
        few_shot_examples("nope", 3)
