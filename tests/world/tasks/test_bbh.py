"""The bbh family: gold chains of thought, answer extraction, the 1-shot context of training records."""

from __future__ import annotations

import re
from collections import Counter

from mars.world import tasks as T
from mars.world.tasks import bbh, extract_answer, make_splits, score
from tests.world.tasks.helpers import by_family


def test_bbh_gold_independently_correct():
    exs = make_splits(300, 0, seed=5)[0]
    seen = Counter()
    for x in by_family(exs, "bbh"):
        sub, ans, p = x["target"]["subtask"], x["target"]["answer"], x["prompt"]
        seen[sub] += 1
        assert x["response"].startswith("Let's think step by step.")
        assert x["response"].endswith(f"So the answer is {ans}.")
        if sub == "boolean_expressions":
            assert str(eval(p.split(": ", 1)[1])) == ans
        elif sub == "multistep_arithmetic":
            assert str(eval(p.split(": ", 1)[1].rstrip("= "))) == ans
        elif sub == "word_sorting":
            words = p.split("List: ")[1].split()
            assert ans == " ".join(sorted(words))
        elif sub == "dyck_languages":
            seq = p.split("Input: ")[1].split() + ans.split()
            stack = []
            pairs = {")": "(", "]": "[", "}": "{", ">": "<"}
            for tok in seq:
                if tok in pairs:
                    assert stack and stack.pop() == pairs[tok]
                else:
                    stack.append(tok)
            assert not stack and ans
        elif sub == "object_counting":
            cat = re.search(r"How many (.+) do I have\?", p).group(1)
            words = {"a": 1, "two": 2, "three": 3}
            total = 0
            for cnt, noun in re.findall(r"\b(a|two|three) (\w+)", p):
                singular = noun[:-2] if noun.endswith("ches") else noun[:-1] if cnt != "a" else noun
                if singular in bbh._BBH_OBJECTS[cat]:
                    total += words[cnt]
            assert str(total) == ans
    assert set(seen) == set(T.BBH_SUBTASKS)


def test_bbh_extraction_formats():
    assert extract_answer("bbh", "So the answer is False.") == "False"
    assert score("bbh", "so the answer is false", {"answer": "False"})["exact_match"] == 1.0
    assert score("bbh", "So the answer is:   cup  pig sun . \n", {"answer": "cup pig sun"})["exact_match"] == 1.0
    assert score("bbh", "So the answer is ] } ).", {"answer": "] } )"})["exact_match"] == 1.0
    assert score("bbh", "the answer is -10.\n\nQ: next question", {"answer": "-10"})["exact_match"] == 1.0
    assert score("bbh", "The answer is 3. Actually the answer is 4.", {"answer": "4"})["exact_match"] == 1.0
    assert score("bbh", "False", {"answer": "False"})["exact_match"] == 0.0  # no "answer is": invalid
    assert extract_answer("bbh", "") is None


def test_bbh_shot_context_matches_the_tiny_eval_shot(splits):
    """Half the bbh train records past the first three of a subtask are 1-shot conversations whose shot is the first
    train record of that subtask (what lm-eval's first_n sampler picks); the eval's shot records stay plain."""
    from mars.evaluation.tasks import FEWSHOT

    assert FEWSHOT["bbh"] <= T.BBH_EVAL_SHOTS
    train, _ = splits
    bbh = by_family(train, "bbh")
    by_sub: dict[str, list[dict]] = {}
    for rec in bbh:
        by_sub.setdefault(rec["target"]["subtask"], []).append(rec)
    with_context = 0
    for sub, recs in by_sub.items():
        assert all("messages" not in r for r in recs[: T.BBH_EVAL_SHOTS])
        for r in recs[T.BBH_EVAL_SHOTS :]:
            if "messages" in r:
                with_context += 1
                shot = recs[0]
                assert r["messages"] == [
                    {"role": "user", "content": shot["prompt"]},
                    {"role": "assistant", "content": shot["response"]},
                    {"role": "user", "content": r["prompt"]},
                ]
    assert abs(with_context - (len(bbh) - T.BBH_EVAL_SHOTS * len(by_sub)) / 2) <= len(by_sub)
