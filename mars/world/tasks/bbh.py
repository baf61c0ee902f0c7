"""The bbh family: five BIG-Bench-Hard-like subtasks with a short chain of thought ending in "So the answer is X.".

Subtasks: boolean_expressions, word_sorting, multistep_arithmetic, dyck_languages, object_counting.  As in
lm-eval's BBH CoT tasks the answer is the text after "the answer is" (final period removed) and ``exact_match``
ignores case and surrounding whitespace.

BBH in context: the tiny BBH task is 1-shot (``mars.evaluation.tasks.FEWSHOT``), the shot a user/assistant turn before
the question.  A model that never saw a multi-turn prompt in SFT answers those badly, so every second bbh training
record past the first three of its subtask (the evaluation's shots) carries a ``messages`` context: the first
record of its subtask as a solved turn, then its own question (:func:`with_shot_context`).
"""

from __future__ import annotations

import functools
import random
import re
from typing import Any

from mars.world.tasks.common import Family, _answer_of, _norm_ws, draw_generated

BBH_SUBTASKS: tuple[str, ...] = (
    "boolean_expressions",
    "word_sorting",
    "multistep_arithmetic",
    "dyck_languages",
    "object_counting",
)
_COT = "Let's think step by step."
BBH_WORDS = [
    "ant",
    "bell",
    "cup",
    "dog",
    "egg",
    "fox",
    "gem",
    "hat",
    "ink",
    "jam",
    "kite",
    "lamp",
    "map",
    "nest",
    "owl",
    "pen",
    "quiz",
    "rug",
    "sun",
    "top",
    "urn",
    "van",
    "web",
    "yak",
    "zoo",
    "bag",
    "cat",
    "dot",
    "fan",
    "gum",
    "hen",
    "jar",
    "key",
    "log",
    "mud",
    "nut",
    "oak",
    "pot",
    "rat",
    "sky",
    "tea",
    "vet",
    "wax",
]
_BBH_OBJECTS = {
    "fruits": ["fig", "plum", "pear", "peach", "lemon", "grape"],
    "animals": ["cat", "dog", "goat", "pig", "cow", "duck"],
    "musical instruments": ["drum", "flute", "piano", "violin", "harp", "bell"],
}
_COUNT_WORDS = {1: "a", 2: "two", 3: "three"}


def _plural(noun: str) -> str:
    return noun + ("es" if noun.endswith(("ch", "sh", "s", "x")) else "s")


def _bool_term(rng: random.Random) -> tuple[str, bool, list[str]]:
    kind = rng.choice(["lit", "not", "paren", "notparen"])
    a = rng.choice([True, False])
    if kind == "lit":
        return str(a), a, []
    if kind == "not":
        return f"not {a}", not a, [f"not {a} = {not a}."]
    b = rng.choice([True, False])
    op = rng.choice(["and", "or"])
    v = (a and b) if op == "and" else (a or b)
    steps = [f"{a} {op} {b} = {v}."]
    if kind == "paren":
        return f"( {a} {op} {b} )", v, steps
    steps.append(f"not {v} = {not v}.")
    return f"not ( {a} {op} {b} )", not v, steps


def _bbh_boolean(rng: random.Random) -> tuple[str, str, list[str], str]:
    while True:
        t1, v1, s1 = _bool_term(rng)
        t2, v2, s2 = _bool_term(rng)
        if len(s1) + len(s2) <= 3:
            break
    op = rng.choice(["and", "or"])
    v = (v1 and v2) if op == "and" else (v1 or v2)
    expr = f"{t1} {op} {t2}"
    steps = s1 + s2 + [f"{v1} {op} {v2} = {v}."]
    return expr, f"Evaluate the Boolean expression: {expr}", steps, str(v)


def _bbh_words(rng: random.Random) -> tuple[str, str, list[str], str]:
    n = rng.randint(3, 5)
    by_letter: dict[str, list[str]] = {}
    for w in BBH_WORDS:
        by_letter.setdefault(w[0], []).append(w)
    letters = rng.sample(sorted(by_letter), n)
    words = [rng.choice(by_letter[c]) for c in letters]
    ordered = sorted(words)
    steps = [
        "The first letters are " + ", ".join(w[0] for w in words) + ".",
        "In order they are " + ", ".join(w[0] for w in ordered) + ".",
    ]
    key = " ".join(words)
    return key, f"Sort the following words alphabetically: List: {key}", steps, " ".join(ordered)


def _apply(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def _bbh_arith(rng: random.Random) -> tuple[str, str, list[str], str]:
    while True:
        shape = rng.randint(1, 3)
        nums = [rng.randint(1, 6) for _ in range(4)]
        ops = [rng.choice("+-*") for _ in range(3)]
        a, b, c, d = nums
        if shape == 1:
            x = _apply(a, ops[0], b)
            y = _apply(x, ops[1], c)
            expr = f"( {a} {ops[0]} {b} ) {ops[1]} {c}"
            steps = [f"{a} {ops[0]} {b} = {x}.", f"{x} {ops[1]} {c} = {y}."]
            vals = [x, y]
        elif shape == 2:
            x = _apply(b, ops[1], c)
            y = _apply(a, ops[0], x)
            expr = f"{a} {ops[0]} ( {b} {ops[1]} {c} )"
            steps = [f"{b} {ops[1]} {c} = {x}.", f"{a} {ops[0]} {x} = {y}."]
            vals = [x, y]
        else:
            x = _apply(a, ops[0], b)
            z = _apply(c, ops[2], d)
            y = _apply(x, ops[1], z)
            expr = f"( {a} {ops[0]} {b} ) {ops[1]} ( {c} {ops[2]} {d} )"
            steps = [f"{a} {ops[0]} {b} = {x}.", f"{c} {ops[2]} {d} = {z}.", f"{x} {ops[1]} {z} = {y}."]
            vals = [x, z, y]
        if all(abs(v) <= 99 for v in vals):
            break
    return expr, f"Solve the arithmetic problem: {expr} =", steps, str(y)


_DYCK_PAIRS = {"(": ")", "[": "]", "{": "}", "<": ">"}


def _bbh_dyck(rng: random.Random) -> tuple[str, str, list[str], str]:
    while True:
        length = rng.randint(2, 6)
        seq: list[str] = []
        stack: list[str] = []
        for _ in range(length):
            if stack and rng.random() < 0.35:
                seq.append(_DYCK_PAIRS[stack.pop()])
            else:
                o = rng.choice(list(_DYCK_PAIRS))
                seq.append(o)
                stack.append(o)
        if 1 <= len(stack) <= 3:
            break
    inp = " ".join(seq)
    answer = " ".join(_DYCK_PAIRS[o] for o in reversed(stack))
    prompt = f"Complete the rest of the sequence, making sure that the parentheses are closed properly. Input: {inp}"
    steps = ["The open brackets are " + " ".join(stack) + "."]
    return inp, prompt, steps, answer


def _bbh_counting(rng: random.Random) -> tuple[str, str, list[str], str]:
    cats = list(_BBH_OBJECTS)
    cat = rng.choice(cats)
    nrel = rng.randint(2, 3)
    rel = rng.sample(_BBH_OBJECTS[cat], nrel)
    counts = [rng.randint(1, 3) for _ in rel]
    items = list(zip(rel, counts))
    if rng.random() < 0.5:
        other = rng.choice([c for c in cats if c != cat])
        noun = rng.choice([w for w in _BBH_OBJECTS[other] if w not in rel])
        items.insert(rng.randint(0, len(items)), (noun, rng.randint(1, 3)))
    phrases = [f"{_COUNT_WORDS[c]} {n if c == 1 else _plural(n)}" for n, c in items]
    if len(phrases) == 2:
        listing = f"{phrases[0]} and {phrases[1]}"
    else:
        listing = ", ".join(phrases[:-1]) + f", and {phrases[-1]}"
    prompt = f"I have {listing}. How many {cat} do I have?"
    named = ", ".join(f"{n if c == 1 else _plural(n)} ({c})" for n, c in zip(rel, counts))
    total = sum(counts)
    steps = [f"The {cat} are {named}.", " + ".join(str(c) for c in counts) + f" = {total}."]
    return prompt, prompt, steps, str(total)


_BBH_GENERATORS = {
    "boolean_expressions": _bbh_boolean,
    "word_sorting": _bbh_words,
    "multistep_arithmetic": _bbh_arith,
    "dyck_languages": _bbh_dyck,
    "object_counting": _bbh_counting,
}


def _gen_bbh(rng: random.Random, subtask: str | None = None, **_: Any) -> tuple[str, dict]:
    sub = subtask or rng.choice(BBH_SUBTASKS)
    key, prompt, steps, answer = _BBH_GENERATORS[sub](rng)
    response = " ".join([_COT] + steps + [f"So the answer is {answer}."])
    return f"{sub}|{key}", {"prompt": prompt, "response": response, "target": {"subtask": sub, "answer": answer}}


def _extract_bbh(text: str) -> str | None:
    matches = list(re.finditer(r"answer is", text, flags=re.IGNORECASE))
    if not matches:
        return None
    ans = text[matches[-1].end() :].split("\n", 1)[0].strip()
    if ans.startswith(":"):
        ans = ans[1:].strip()
    if ans.endswith("."):
        ans = ans[:-1].strip()
    ans = _norm_ws(ans)
    return ans or None


BBH_EVAL_SHOTS = 3  # records per subtask left plain: lm-eval's first_n sampler may take them as shots


def with_shot_context(records: list[dict]) -> list[dict]:
    """Every second bbh record past the first BBH_EVAL_SHOTS of its subtask gets a 1-shot ``messages`` context."""
    first: dict[str, dict] = {}
    seen: dict[str, int] = {}
    out = []
    for rec in records:
        sub = rec["target"]["subtask"]
        first.setdefault(sub, rec)
        seen[sub] = seen.get(sub, 0) + 1
        if seen[sub] > BBH_EVAL_SHOTS and seen[sub] % 2 == 0:
            shot = first[sub]
            rec = dict(
                rec,
                messages=[
                    {"role": "user", "content": shot["prompt"]},
                    {"role": "assistant", "content": shot["response"]},
                    {"role": "user", "content": rec["prompt"]},
                ],
            )
        out.append(rec)
    return out


def _score_bbh(text: str, target: Any) -> dict[str, float]:
    pred = _extract_bbh(text)
    if pred is None:
        return {"exact_match": 0.0}
    return {"exact_match": float(pred.lower() == _norm_ws(_answer_of(target)).lower())}


FAMILY = Family(
    name="bbh",
    generate=functools.partial(draw_generated, "bbh", _gen_bbh),
    extract=_extract_bbh,
    score=_score_bbh,
    metrics=(("exact_match", "mean"),),
)
