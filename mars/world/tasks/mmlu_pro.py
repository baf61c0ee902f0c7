"""The mmlu_pro family: 10-option (A-J) multiple choice over the fact base (mars.world.tasks.facts).

Answer format and extraction follow MMLU-Pro: "... The answer is (D)."; ``exact_match`` on the letter.  The answer's
chain of thought recalls the fact, then walks the options up to it ("The zorp is blue. A is red, not blue. B is
blue. The answer is (B).").  Exactly 100 facts are reserved for test questions, which therefore never appear as
multiple-choice questions in train (the model must transfer a taught fact to the multiple-choice format).
"""

from __future__ import annotations

import functools
import random
from typing import Any

from mars.world.tasks.common import LETTERS, Family, _answer_of
from mars.world.tasks.facts import (
    _FACT_QUESTION,
    ATTRIBUTE_VALUES,
    ATTRIBUTES,
    _extract_letter,
    _fact_sentence,
    _option_walk,
    _the,
    draw_fact_mc,
)


def _mmlu_question(rng: random.Random, fb: dict, e: str, a: str) -> dict:
    v = fb["attrs"][e][a]
    options = list(ATTRIBUTE_VALUES[a])
    rng.shuffle(options)
    letter = LETTERS[options.index(v)]
    lines = [f"{LETTERS[i]}. {o}" for i, o in enumerate(options)]
    prompt = (
        "Answer the multiple choice question.\nQuestion: "
        + _FACT_QUESTION[a].format(e=_the(e))
        + "\nOptions:\n"
        + "\n".join(lines)
    )
    response = f"{_fact_sentence(e, a, v)} {_option_walk(options, v)} The answer is ({letter})."
    return {
        "prompt": prompt,
        "response": response,
        "target": {"answer": letter, "options": options, "entity": e, "attribute": a, "value": v},
    }


def _pairs(fb: dict) -> tuple[list, list]:
    test_pairs = [tuple(x) for x in fb["test_facts"]]
    test_set = set(test_pairs)
    train_pairs = [(e, a) for e in fb["entities"] for a in ATTRIBUTES if (e, a) not in test_set]
    return test_pairs, train_pairs


def _score(text: str, target: Any) -> dict[str, float]:
    pred = _extract_letter(text, LETTERS)
    if pred is None:
        return {"exact_match": 0.0}
    return {"exact_match": float(pred == _answer_of(target).strip().upper())}


FAMILY = Family(
    name="mmlu_pro",
    generate=functools.partial(draw_fact_mc, "mmlu_pro", _mmlu_question, _pairs, "facts"),
    extract=lambda text: _extract_letter(text, LETTERS),
    score=_score,
    metrics=(("exact_match", "mean"),),
)
