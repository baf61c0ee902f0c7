"""The ifeval family: a short note with one or two verifiable instructions (IFEval-shaped).

"Write a short note about cats." plus one or two instructions drawn from: all lowercase, all capitals, include a
keyword, end with an exact phrase, exactly N "* " bullet points, wrap in double quotes, exactly N sentences, start
with a given word.  Instruction ids and checker logic follow IFEval (``change_case:english_lowercase``,
``keywords:existence``, ``startend:end_checker``, ``detectable_format:number_bullet_lists`` ...), scored "strict":
``prompt_level_strict_acc`` (all instructions pass) and ``inst_level_strict_acc`` (passed/total for this prompt),
plus the raw counts ``inst_passed`` / ``inst_total``.  lm-eval reports the instruction-level accuracy as IFEval
does, the mean over ALL instructions of all prompts (:func:`agg_inst_level_acc`).
"""

from __future__ import annotations

import functools
import random
import re
from typing import Any, Callable

from mars.world.tasks.common import Family, _as_text, draw_generated

IFEVAL_TOPICS: dict[str, list[str]] = {
    "cats": ["Cats are soft.", "They sleep a lot.", "Cats like to play.", "Many people love cats."],
    "dogs": ["Dogs are loyal.", "They like long walks.", "Dogs love to run.", "A dog is a good pet."],
    "rain": ["Rain falls from clouds.", "It makes the ground wet.", "Plants need rain.", "Rain can be loud."],
    "the sea": ["The sea is big.", "It is full of fish.", "The sea has waves.", "People swim in the sea."],
    "music": ["Music is fun.", "It can make us dance.", "Music has a beat.", "Many people sing along."],
    "bread": [
        "Bread is made from flour.",
        "It is baked in an oven.",
        "Bread tastes good.",
        "People eat bread every day.",
    ],
    "trains": ["Trains run on tracks.", "They carry many people.", "Trains can be fast.", "Some trains are very long."],
    "the moon": [
        "The moon shines at night.",
        "It goes around the earth.",
        "The moon has no air.",
        "It looks round and white.",
    ],
    "gardens": ["Gardens have flowers.", "They need water.", "Bees visit gardens.", "A garden takes work."],
    "books": ["Books tell stories.", "They are made of paper.", "Books teach us things.", "Many people read books."],
    "winter": ["Winter is cold.", "Snow falls in winter.", "Days are short in winter.", "People wear thick coats."],
    "coffee": ["Coffee is a drink.", "It is made from beans.", "Coffee can be hot.", "Many people drink it."],
}
IFEVAL_REQUESTS = [
    "Write a short note about {t}.",
    "Write a few lines about {t}.",
    "Tell me about {t}.",
    "Describe {t} briefly.",
]
IFEVAL_KEYWORDS = ["warm", "calm", "bright", "simple", "quiet", "fresh", "kind", "happy"]
IFEVAL_END_PHRASES = ["Is there anything else?", "That is all.", "Hope this helps."]
IFEVAL_START_WORDS = ["Well", "Sure", "Yes", "Here", "Today", "Okay"]
IFEVAL_DEFAULT_SENTENCES = 3

I_LOWER = "change_case:english_lowercase"
I_UPPER = "change_case:english_capital"
I_KEYWORD = "keywords:existence"
I_END = "startend:end_checker"
I_BULLETS = "detectable_format:number_bullet_lists"
I_QUOTES = "startend:quotation"
I_SENTENCES = "length_constraints:number_sentences"
I_FIRST_WORD = "startend:first_word"

IFEVAL_INSTRUCTIONS: tuple[str, ...] = (
    I_LOWER,
    I_UPPER,
    I_KEYWORD,
    I_END,
    I_BULLETS,
    I_QUOTES,
    I_SENTENCES,
    I_FIRST_WORD,
)

# pairs of instructions never combined in one prompt (contradictory or
# interfering with each other's checker)
_IFEVAL_CONFLICTS = [
    {I_LOWER, I_UPPER},
    {I_BULLETS, I_SENTENCES},
    {I_BULLETS, I_QUOTES},
    {I_BULLETS, I_FIRST_WORD},
    {I_SENTENCES, I_END},
]


def _check_lowercase(text: str) -> bool:
    return bool(text.strip()) and text == text.lower()


def _check_uppercase(text: str) -> bool:
    return bool(text.strip()) and text == text.upper()


def _check_keyword(text: str, keywords: list[str]) -> bool:
    if not text.strip():
        return False
    return all(re.search(r"\b" + re.escape(k) + r"\b", text, flags=re.IGNORECASE) for k in keywords)


def _check_end(text: str, end_phrase: str) -> bool:
    value = text.strip().strip('"').lower()
    return bool(value) and value.endswith(end_phrase.strip().lower())


def count_bullets(text: str) -> int:
    """Markdown bullets as IFEval counts them ("* x" and "- x" lines)."""
    stars = re.findall(r"^\s*\*[^\*].*$", text, flags=re.MULTILINE)
    dashes = re.findall(r"^\s*-.*$", text, flags=re.MULTILINE)
    return len(stars) + len(dashes)


def _check_bullets(text: str, num_bullets: int) -> bool:
    return count_bullets(text) == num_bullets


def _check_quotes(text: str) -> bool:
    value = text.strip()
    return len(value) > 1 and value[0] == '"' and value[-1] == '"'


def count_sentences(text: str) -> int:
    """Sentences = segments ending in . ! ? (or end of text) that contain a letter/digit."""
    value = text.strip().strip('"')
    parts = re.split(r"[.!?]+(?=\s|$|\")", value)
    return sum(1 for p in parts if re.search(r"[A-Za-z0-9]", p))


def _check_sentences(text: str, num_sentences: int, relation: str = "exactly") -> bool:
    n = count_sentences(text)
    if relation == "exactly":
        return n == num_sentences
    if relation == "less than":
        return n < num_sentences
    if relation == "at least":
        return n >= num_sentences
    return False


def _check_first_word(text: str, first_word: str) -> bool:
    value = text.strip().lstrip("\"'*").strip()
    if not value:
        return False
    word = re.sub(r"[^A-Za-z0-9]", "", value.split()[0])
    return word.lower() == first_word.lower()


IFEVAL_CHECKERS: dict[str, Callable[..., bool]] = {
    I_LOWER: _check_lowercase,
    I_UPPER: _check_uppercase,
    I_KEYWORD: _check_keyword,
    I_END: _check_end,
    I_BULLETS: _check_bullets,
    I_QUOTES: _check_quotes,
    I_SENTENCES: _check_sentences,
    I_FIRST_WORD: _check_first_word,
}


def check_instruction(instruction_id: str, text: str, kwargs: dict | None = None) -> bool:
    """Strict IFEval-style check of one instruction on a response (never raises)."""
    fn = IFEVAL_CHECKERS.get(instruction_id)
    if fn is None:
        raise ValueError(f"unknown ifeval instruction id {instruction_id!r}")
    try:
        return bool(fn(_as_text(text), **(kwargs or {})))
    except Exception:  # malformed input must count as a failure, not crash
        return False


def _ifeval_instruction_text(inst: str, kw: dict) -> str:
    if inst == I_LOWER:
        return "Use only lowercase letters."
    if inst == I_UPPER:
        return "Use only capital letters."
    if inst == I_KEYWORD:
        return f"Include the word {kw['keywords'][0]}."
    if inst == I_END:
        return f'End with the exact phrase "{kw["end_phrase"]}"'
    if inst == I_BULLETS:
        return f'Use exactly {kw["num_bullets"]} bullet points like "* point".'
    if inst == I_QUOTES:
        return "Wrap your entire answer in double quotes."
    if inst == I_SENTENCES:
        return f"Write exactly {kw['num_sentences']} sentences."
    if inst == I_FIRST_WORD:
        return f'Start your answer with the word "{kw["first_word"]}".'
    raise AssertionError(inst)


def _ifeval_kwargs(inst: str, rng: random.Random) -> dict:
    if inst == I_KEYWORD:
        return {"keywords": [rng.choice(IFEVAL_KEYWORDS)]}
    if inst == I_END:
        return {"end_phrase": rng.choice(IFEVAL_END_PHRASES)}
    if inst == I_BULLETS:
        return {"num_bullets": rng.randint(2, 4)}
    if inst == I_SENTENCES:
        return {"num_sentences": rng.randint(1, 4), "relation": "exactly"}
    if inst == I_FIRST_WORD:
        return {"first_word": rng.choice(IFEVAL_START_WORDS)}
    return {}


def _ifeval_response(topic: str, insts: list[str], kwargs: list[dict]) -> str:
    cfg = dict(zip(insts, kwargs))
    n = IFEVAL_DEFAULT_SENTENCES
    if I_SENTENCES in cfg:
        n = cfg[I_SENTENCES]["num_sentences"]
    if I_BULLETS in cfg:
        n = cfg[I_BULLETS]["num_bullets"]
    sents = list(IFEVAL_TOPICS[topic][:n])
    if I_KEYWORD in cfg:
        sents[-1] = f"It feels {cfg[I_KEYWORD]['keywords'][0]}."
    if I_FIRST_WORD in cfg:
        first = sents[0]
        sents[0] = f"{cfg[I_FIRST_WORD]['first_word']}, {first[0].lower()}{first[1:]}"
    if I_BULLETS in cfg:
        text = "\n".join("* " + s for s in sents)
        if I_END in cfg:
            text += "\n" + cfg[I_END]["end_phrase"]
    else:
        text = " ".join(sents)
        if I_END in cfg:
            text += " " + cfg[I_END]["end_phrase"]
    if I_LOWER in cfg:
        text = text.lower()
    if I_UPPER in cfg:
        text = text.upper()
    if I_QUOTES in cfg:
        text = '"' + text + '"'
    return text


def _gen_ifeval(rng: random.Random, **_: Any) -> tuple[str, dict]:
    topic = rng.choice(list(IFEVAL_TOPICS))
    k = rng.choice([1, 2])
    while True:
        insts = [rng.choice(IFEVAL_INSTRUCTIONS) for _ in range(k)]
        if len(set(insts)) != k:
            continue
        if k == 2 and set(insts) in _IFEVAL_CONFLICTS:
            continue
        break
    kwargs = [_ifeval_kwargs(i, rng) for i in insts]
    request = rng.choice(IFEVAL_REQUESTS).format(t=topic)
    prompt = " ".join([request] + [_ifeval_instruction_text(i, kw) for i, kw in zip(insts, kwargs)])
    response = _ifeval_response(topic, insts, kwargs)
    key = topic + "|" + "|".join(sorted(f"{i}:{sorted(kw.items())}" for i, kw in zip(insts, kwargs)))
    target = {"instruction_id_list": insts, "kwargs": kwargs}
    return key, {"prompt": prompt, "response": response, "target": target}


def _score_ifeval(completion: str, target: dict) -> dict[str, float]:
    insts = list(target["instruction_id_list"])
    kwargs = list(target.get("kwargs") or [{} for _ in insts])
    passed = sum(1 for i, kw in zip(insts, kwargs) if check_instruction(i, completion, kw))
    total = len(insts)
    return {
        "prompt_level_strict_acc": float(total > 0 and passed == total),
        "inst_level_strict_acc": passed / total if total else 0.0,
        "inst_passed": float(passed),
        "inst_total": float(total),
    }


def agg_inst_level_acc(items: list) -> float:
    """Mean over all instructions of all prompts (IFEval's ``agg_inst_level_acc``)."""
    flat = [bool(x) for item in items for x in (item if isinstance(item, (list, tuple)) else [item])]
    return sum(flat) / len(flat) if flat else 0.0


def _lm_eval_results(completion: str, target: Any) -> dict:
    """prompt-level strict accuracy, and the per-instruction pass flags (in the order of the target's
    ``instruction_id_list``), which :func:`agg_inst_level_acc` aggregates over all instructions."""
    m = _score_ifeval(completion, target)
    passed, total = int(m["inst_passed"]), int(m["inst_total"])
    insts = list(target.get("instruction_id_list") or [])
    kwargs = list(target.get("kwargs") or [{} for _ in insts])
    flags = [bool(check_instruction(i, completion, kw)) for i, kw in zip(insts, kwargs)]
    if len(flags) != total or sum(flags) != passed:  # keep the score's numbers authoritative
        flags = [True] * passed + [False] * (total - passed)
    return {"prompt_level_strict_acc": m["prompt_level_strict_acc"], "inst_level_strict_acc": flags}


FAMILY = Family(
    name="ifeval",
    generate=functools.partial(draw_generated, "ifeval", _gen_ifeval),
    extract=lambda text: text.strip() or None,
    score=_score_ifeval,
    metrics=(("prompt_level_strict_acc", "mean"), ("inst_level_strict_acc", agg_inst_level_acc)),
    per_document=_lm_eval_results,
)
