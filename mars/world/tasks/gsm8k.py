"""The gsm8k family: two/three-step arithmetic word problems with worked steps, final line "#### N".

``exact_match`` is lm-eval's strict match (the number after "####"); ``exact_match_flexible`` the flexible extract
(the last number in the text).
"""

from __future__ import annotations

import functools
import random
import re
from typing import Any

from mars.world.tasks.common import Family, _answer_of, draw_generated

_GSM_MALE = ["Tom", "Sam", "Ben", "Max", "Leo"]
_GSM_FEMALE = ["Ann", "Mia", "Eva", "Lily", "Zoe"]
_GSM_ITEMS = ["apples", "pens", "books", "eggs", "cards", "shells", "coins", "stickers", "marbles", "cookies"]


def _gsm_people(rng: random.Random, k: int) -> list[tuple[str, str]]:
    pool = [(n, "he") for n in _GSM_MALE] + [(n, "she") for n in _GSM_FEMALE]
    return rng.sample(pool, k)


def _gen_gsm8k(rng: random.Random, **_: Any) -> tuple[str, dict]:
    t = rng.randint(1, 7)
    (n, p), (m, _p2), (k2, _p3) = _gsm_people(rng, 3)
    P = p.capitalize()
    it = rng.choice(_GSM_ITEMS)
    if t == 1:
        a, b, c = rng.randint(2, 9), rng.randint(2, 4), rng.randint(2, 5)
        bc = b * c
        ans = a + bc
        prompt = f"{n} has {a} {it}. {P} buys {b} bags with {c} {it} in each bag. How many {it} does {n} have now?"
        steps = [f"{P} buys {b} * {c} = {bc} {it}.", f"{n} has {a} + {bc} = {ans} {it}."]
        nums = (a, b, c)
    elif t == 2:
        a = rng.randint(5, 20)
        b, c = rng.randint(1, a - 1), rng.randint(1, 9)
        x = a - b
        ans = x + c
        prompt = f"{n} has {a} {it}. {P} gives {b} to {m}. Then {p} finds {c} more. How many {it} does {n} have now?"
        steps = [f"After giving, {n} has {a} - {b} = {x} {it}.", f"Then {n} has {x} + {c} = {ans} {it}."]
        nums = (a, b, c)
    elif t == 3:
        a, b = rng.randint(2, 5), rng.randint(2, 5)
        ab = a * b
        c = rng.randint(1, ab - 1)
        ans = ab - c
        prompt = f"{n} has {a} boxes. Each box holds {b} {it}. {P} uses {c} of the {it}. How many {it} are left?"
        steps = [f"There are {a} * {b} = {ab} {it}.", f"{ab} - {c} = {ans} {it} are left."]
        nums = (a, b, c)
    elif t == 4:
        a, b = rng.randint(2, 6), rng.randint(2, 5)
        ab = a * b
        c = rng.randint(1, ab - 1)
        ans = ab - c
        prompt = (
            f"{n} earns {a} dollars each day for {b} days. Then {p} spends {c} dollars. "
            f"How many dollars does {n} have left?"
        )
        steps = [f"{P} earns {a} * {b} = {ab} dollars.", f"{P} has {ab} - {c} = {ans} dollars left."]
        nums = (a, b, c)
    elif t == 5:
        a, b = rng.randint(2, 15), rng.randint(1, 9)
        x = a + b
        ans = a + x
        prompt = f"{n} has {a} {it}. {m} has {b} more {it} than {n}. How many {it} do they have together?"
        steps = [f"{m} has {a} + {b} = {x} {it}.", f"Together they have {a} + {x} = {ans} {it}."]
        nums = (a, b)
    elif t == 6:
        a, b, c = rng.randint(2, 6), rng.randint(2, 4), rng.randint(1, 9)
        tot = a * b
        ans = a + c
        prompt = (
            f"{n} has {tot} {it} and shares them equally among {b} friends. "
            f"Then each friend gets {c} more. How many {it} does each friend have?"
        )
        steps = [f"Each friend gets {tot} / {b} = {a} {it}.", f"Then each friend has {a} + {c} = {ans} {it}."]
        nums = (a, b, c)
    else:
        a, b = rng.randint(2, 4), rng.randint(3, 6)
        ab = a * b
        c = rng.randint(1, ab // 2)
        d = rng.randint(1, ab - c - 1)
        cd = c + d
        ans = ab - cd
        prompt = (
            f"{n} buys {a} packs of {b} {it}. {P} gives {c} to {m} and {d} to {k2}. How many {it} does {n} have left?"
        )
        steps = [
            f"{P} buys {a} * {b} = {ab} {it}.",
            f"{P} gives away {c} + {d} = {cd} {it}.",
            f"{ab} - {cd} = {ans} {it} are left.",
        ]
        nums = (a, b, c, d)
    response = " ".join(steps) + f"\n#### {ans}"
    key = f"{t}|" + ",".join(map(str, nums))
    return key, {"prompt": prompt, "response": response, "target": {"answer": str(ans)}}


def _norm_number(s: str) -> str | None:
    s = s.strip().replace(",", "").replace("$", "")
    s = s.rstrip(".")
    if not re.fullmatch(r"-?\d+(\.\d+)?", s):
        return None
    if "." in s:
        f = float(s)
        if f == int(f):
            return str(int(f))
        return repr(f)
    return str(int(s))


def _extract_gsm_strict(text: str) -> str | None:
    m = re.search(r"####\s*\$?\s*(-?[0-9][0-9.,]*)", text)
    return _norm_number(m.group(1)) if m else None


def _extract_gsm_flexible(text: str) -> str | None:
    ms = re.findall(r"-?\$?\d[\d,]*(?:\.\d+)?", text)
    for cand in reversed(ms):
        v = _norm_number(cand)
        if v is not None:
            return v
    return None


def _score_gsm8k(text: str, target: Any) -> dict[str, float]:
    gold = _norm_number(_answer_of(target))
    strict = _extract_gsm_strict(text)
    flex = _extract_gsm_flexible(text)
    return {
        "exact_match": float(strict is not None and strict == gold),
        "exact_match_flexible": float(flex is not None and flex == gold),
    }


FAMILY = Family(
    name="gsm8k",
    generate=functools.partial(draw_generated, "gsm8k", _gen_gsm8k),
    extract=_extract_gsm_strict,
    score=_score_gsm8k,
    metrics=(("exact_match", "mean"), ("exact_match_flexible", "mean")),
)
