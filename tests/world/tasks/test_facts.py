"""The fact base and its multiple-choice families (mmlu_pro, gpqa): options, option walks, letters."""

from __future__ import annotations

import re

from mars.world import tasks as T
from mars.world.tasks import extract_answer, make_splits, score
from tests.world.tasks.helpers import by_family


def test_mc_options_well_formed(splits):
    train, test = splits
    for x in by_family(train + test, "mmlu_pro"):
        opts = x["target"]["options"]
        assert len(opts) == len(set(opts)) == 10
        for i, o in enumerate(opts):
            assert f"\n{'ABCDEFGHIJ'[i]}. {o}" in x["prompt"]
        assert x["response"].endswith(f"The answer is ({x['target']['answer']}).")
    for x in by_family(train + test, "gpqa"):
        opts = x["target"]["options"]
        assert len(opts) == len(set(opts)) == 4
        for i, o in enumerate(opts):
            assert f"\n({'ABCD'[i]}) {o}" in x["prompt"]
        assert opts[T.LETTERS.index(x["target"]["answer"])] == x["target"]["value"]


def test_mc_answers_walk_the_prompt_options_up_to_the_answer(splits):
    train, test = splits
    for x in by_family(train + test, "mmlu_pro") + by_family(train + test, "gpqa"):
        listed = re.findall(r"^\(?([A-J])[.)] (\w+)$", x["prompt"], flags=re.M)  # the options as the prompt shows them
        walked = re.findall(r"\b([A-J]) is (\w+)(?:, not (\w+))?\.", x["response"])
        letter = x["response"][-3]
        assert [w[:2] for w in walked] == listed[: len(walked)], x["response"]
        assert walked[-1][0] == letter == x["target"]["answer"] and walked[-1][2] == ""  # stops at the answer
        value = x["target"]["options"][T.LETTERS.index(letter)]
        assert walked[-1][1] == value and all(w[2] == value != w[1] for w in walked[:-1])


def test_mc_gold_consistent_with_fact_base():
    fb = T.fact_base(0)
    train, test = make_splits(50, 50, seed=0)
    for x in by_family(train + test, "mmlu_pro"):
        t = x["target"]
        assert t["options"][T.LETTERS.index(t["answer"])] == fb["attrs"][t["entity"]][t["attribute"]]
    for x in by_family(train + test, "gpqa"):
        t = x["target"]
        assert fb["friend"][t["entity"]] == t["friend"]
        assert t["options"][T.LETTERS.index(t["answer"])] == fb["attrs"][t["friend"]][t["attribute"]]
    assert T.fact_base(0) == fb and T.fact_base(1) != fb
    assert all(e != f for e, f in fb["friend"].items())


def test_letter_extraction_formats():
    for text in [
        "The answer is (C).",
        "answer is C",
        "the answer is c",
        "The answer is: (C)",
        "Answer: C",
        "(C)",
        " C. ",
        "blah\nThe answer is (A).\nThe answer is (C).  \n\n",
    ]:
        assert extract_answer("mmlu_pro", text) == "C", text
        assert score("mmlu_pro", text, {"answer": "C"})["exact_match"] == 1.0, text
    for text in ["", "   ", "The answer is (K).", "I don't know", "The answer is", "answer is carrots"]:
        assert extract_answer("mmlu_pro", text) is None, text
        assert score("mmlu_pro", text, {"answer": "C"})["exact_match"] == 0.0
    assert extract_answer("mmlu_pro", "The answer is (J).") == "J"
    assert extract_answer("gpqa", "The answer is (J).") is None  # only A-D exist
    assert extract_answer("gpqa", "so the answer is (d)") == "D"
