"""The ifeval family: instruction checkers, counters and partial credit."""

from __future__ import annotations

from collections import Counter

import pytest

from mars.world import tasks as T
from mars.world.tasks import ifeval, make_splits, score
from tests.world.tasks.helpers import by_family

# ------------------------------------------------------------- ifeval checks

CHECK_CASES = [
    # (instruction id, kwargs, passing text, failing text)
    (ifeval.I_LOWER, {}, "cats are soft. they sleep.", "Cats are soft."),
    (ifeval.I_UPPER, {}, "CATS ARE SOFT. IS THERE ANYTHING ELSE?", "CATS are soft."),
    (ifeval.I_KEYWORD, {"keywords": ["warm"]}, "It feels WARM today.", "It feels warmer today."),
    (
        ifeval.I_END,
        {"end_phrase": "Is there anything else?"},
        '"Cats are soft. is there anything else?"  \n',
        "Is there anything else? Cats are soft.",
    ),
    (ifeval.I_BULLETS, {"num_bullets": 3}, "* one\n* two\n* three", "* one\n* two"),
    (ifeval.I_BULLETS, {"num_bullets": 2}, "- one\n  * two\nThat is all.", "* one\n** two\n* three\n- four"),
    (ifeval.I_QUOTES, {}, '  "Cats are soft."\n', 'Cats are "soft".'),
    (
        ifeval.I_SENTENCES,
        {"num_sentences": 2, "relation": "exactly"},
        "Cats are soft. They sleep!",
        "Cats are soft. They sleep. Cats play.",
    ),
    (ifeval.I_SENTENCES, {"num_sentences": 1, "relation": "exactly"}, '"Cats are soft."', "Cats are soft? Yes."),
    (ifeval.I_FIRST_WORD, {"first_word": "Well"}, '"well, cats are soft."', "Cats are soft. Well."),
    (ifeval.I_FIRST_WORD, {"first_word": "Sure"}, "SURE! Cats.", "Surely cats."),
]


@pytest.mark.parametrize("inst,kwargs,good,bad", CHECK_CASES)
def test_ifeval_checkers(inst, kwargs, good, bad):
    assert T.check_instruction(inst, good, kwargs) is True
    assert T.check_instruction(inst, bad, kwargs) is False
    assert T.check_instruction(inst, "", kwargs) is False


def test_ifeval_counters():
    assert T.count_sentences("One. Two! Three? Four") == 4
    assert T.count_sentences('"Cats are soft. They sleep."') == 2
    assert T.count_sentences("") == 0
    assert T.count_bullets("* a\n* b\n- c\nnot\n**bold**") == 3


def test_ifeval_partial_credit_and_counts():
    target = {"instruction_id_list": [ifeval.I_LOWER, ifeval.I_KEYWORD], "kwargs": [{}, {"keywords": ["calm"]}]}
    assert score("ifeval", "cats are soft.", target) == {
        "prompt_level_strict_acc": 0.0,
        "inst_level_strict_acc": 0.5,
        "inst_passed": 1.0,
        "inst_total": 2.0,
    }
    assert score("ifeval", "cats are calm.\n", target)["prompt_level_strict_acc"] == 1.0
    with pytest.raises(ValueError):
        T.check_instruction("no:such_instruction", "x")


def test_ifeval_covers_all_instructions():
    exs = make_splits(400, 0, seed=0)[0]
    used = Counter(i for x in by_family(exs, "ifeval") for i in x["target"]["instruction_id_list"])
    assert set(used) == set(ifeval.IFEVAL_INSTRUCTIONS)
    n_inst = Counter(len(x["target"]["instruction_id_list"]) for x in by_family(exs, "ifeval"))
    assert set(n_inst) == {1, 2}
