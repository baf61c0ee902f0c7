"""The gpqa family: harder 4-option (A-D) two-hop questions over the fact base, in lm-eval's GPQA CoT style.

"What color is the friend of the zorp?" -> "The friend of the zorp is the blick. The blick is blue. A is red, not
blue. B is blue. The answer is (B)."  One distractor is the 1-hop trap (the zorp's own color) when it differs.  25
source entities are reserved for test (100 questions); train questions use only the other source entities.
``exact_match`` on the letter.
"""

from __future__ import annotations

import functools
import random
from typing import Any

from mars.world.tasks.common import LETTERS, Family, _answer_of
from mars.world.tasks.facts import (
    ATTRIBUTE_VALUES,
    ATTRIBUTES,
    _extract_letter,
    _fact_sentence,
    _option_walk,
    draw_fact_mc,
)

_TWO_HOP_QUESTION = {
    "color": "What color is the friend of the {e}?",
    "city": "Where does the friend of the {e} live?",
    "food": "What does the friend of the {e} eat?",
    "tool": "What does the friend of the {e} carry?",
}


def _gpqa_question(rng: random.Random, fb: dict, e: str, a: str) -> dict:
    f = fb["friend"][e]
    v = fb["attrs"][f][a]
    own = fb["attrs"][e][a]
    distract = [own] if own != v else []
    pool = [x for x in ATTRIBUTE_VALUES[a] if x != v and x not in distract]
    distract += rng.sample(pool, 3 - len(distract))
    options = [v] + distract
    rng.shuffle(options)
    letter = LETTERS[options.index(v)]
    prompt = (
        "What is the correct answer to this question: "
        + _TWO_HOP_QUESTION[a].format(e=e)
        + "\nChoices:\n"
        + "\n".join(f"({LETTERS[i]}) {o}" for i, o in enumerate(options))
    )
    response = (
        f"The friend of the {e} is the {f}. {_fact_sentence(f, a, v)} {_option_walk(options, v)} "
        f"The answer is ({letter})."
    )
    return {
        "prompt": prompt,
        "response": response,
        "target": {"answer": letter, "options": options, "entity": e, "friend": f, "attribute": a, "value": v},
    }


def _pairs(fb: dict) -> tuple[list, list]:
    test_src = set(fb["test_sources"])
    test_pairs = [(e, a) for e in fb["test_sources"] for a in ATTRIBUTES]
    train_pairs = [(e, a) for e in fb["entities"] for a in ATTRIBUTES if e not in test_src]
    return test_pairs, train_pairs


def _score(text: str, target: Any) -> dict[str, float]:
    pred = _extract_letter(text, LETTERS[:4])
    if pred is None:
        return {"exact_match": 0.0}
    return {"exact_match": float(pred == _answer_of(target).strip().upper())}


FAMILY = Family(
    name="gpqa",
    generate=functools.partial(draw_fact_mc, "gpqa", _gpqa_question, _pairs, "source-entity/attribute pairs"),
    extract=lambda text: _extract_letter(text, LETTERS[:4]),
    score=_score,
    metrics=(("exact_match", "mean"),),
)
