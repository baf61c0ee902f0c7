"""The fact base shared by mmlu_pro and gpqa, and the facts family that teaches it.

A synthetic, seed-dependent FACT BASE: 100 invented entities (such as "the zorp"), each with a color, home city,
food and carried object, plus a "friend" entity (:func:`fact_base`).  The facts themselves are taught by separate
fact-teaching examples, family ``"facts"`` (not one of the six benchmark families, not counted in
``n_train_per_family``): one question per (entity, attribute) in two phrasings ("What color is the zorp?", "Tell
me the color of the zorp."), one "Who is the friend of ..." per entity and one "Tell me about ..." summary per
entity (1000 examples), so each fact is seen three times per epoch.  Scored by exact match of the whole answer
sentence.

The multiple-choice families built on it (mmlu_pro, gpqa) answer with a short chain of thought that recalls the
fact, then walks the options up to it (:func:`_option_walk`); :func:`draw_fact_mc` draws their questions, with the
held-out facts or source entities reserved for test.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from mars.world.tasks import common
from mars.world.tasks.bbh import BBH_WORDS
from mars.world.tasks.common import LETTERS, Family, _norm_ws, _rng

FACTS_FAMILY = "facts"

N_ENTITIES = 100
N_TEST_FACTS = 100  # mmlu_pro test questions available
N_TEST_SOURCES = 25  # gpqa test source entities (x 4 attributes = 100 questions)
ATTRIBUTES: tuple[str, ...] = ("color", "city", "food", "tool")
ATTRIBUTE_VALUES: dict[str, list[str]] = {
    "color": ["red", "blue", "green", "yellow", "black", "white", "pink", "brown", "gray", "purple"],
    "city": ["Pelo", "Tarn", "Vima", "Kesh", "Doru", "Mira", "Sola", "Brin", "Fenn", "Lusk"],
    "food": ["figs", "rice", "corn", "fish", "bread", "soup", "nuts", "plums", "beans", "cake"],
    "tool": ["rope", "drum", "lamp", "kite", "bell", "flute", "brush", "spoon", "key", "map"],
}
_FACT_QUESTION = {
    "color": "What color is {e}?",
    "city": "Where does {e} live?",
    "food": "What does {e} eat?",
    "tool": "What does {e} carry?",
}
_FACT_QUESTION_ALT = {
    "color": "Tell me the color of {e}.",
    "city": "Tell me the home city of {e}.",
    "food": "Tell me the food of {e}.",
    "tool": "Tell me the object that {e} carries.",
}
_FACT_STATEMENT = {
    "color": "{E} is {v}.",
    "city": "{E} lives in {v}.",
    "food": "{E} eats {v}.",
    "tool": "{E} carries a {v}.",
}

_NAME_ONSETS = ["bl", "gr", "kr", "sn", "tr", "zw", "fl", "pl", "dr", "gl", "v", "z", "k", "j", "w"]
_NAME_VOWELS = ["a", "e", "i", "o", "u", "oo"]
_NAME_CODAS = ["rp", "x", "sk", "mb", "nk", "zz", "rk", "lk", "ft", "b", "g"]
_NAME_BLACKLIST = {
    "blink",
    "brink",
    "drink",
    "flask",
    "plank",
    "trunk",
    "skunk",
    "drift",
    "graft",
    "blob",
    "glob",
    "grub",
    "frog",
    "flog",
    "plug",
    "drug",
    "slug",
    "snug",
    "jug",
    "wig",
    "wag",
    "zig",
    "zag",
    "jog",
    "kink",
    "wink",
    "zinc",
    "vex",
    "wax",
    "jab",
    "job",
    "web",
    "wok",
    "kelp",
    "jerk",
    "work",
    "lurk",
    "drub",
    "grab",
    "drab",
    "krab",
    "grog",
    "blog",
    "flab",
    "flub",
    "glib",
    "grob",
    "trob",
    "plonk",
    "clonk",
    "klunk",
    "gronk",
    "trek",
    "trox",
    "flax",
    "flex",
    "flux",
    "blix",
    "box",
    "dunk",
    "junk",
    "wonk",
    "bonk",
    "honk",
    "zonk",
    "sank",
    "snob",
    "snag",
    "swig",
    "twig",
    "grex",
    "jinx",
    "lynx",
    "tusk",
    "dusk",
    "husk",
    "musk",
    "whisk",
    "kiosk",
    "kook",
    "book",
    "wool",
    "woog",
    "zoom",
    "woof",
    "wisk",
    "trag",
    "trig",
    "drag",
    "flag",
    "glug",
    "plob",
    "krik",
}


def entity_names() -> list[str]:
    """The 100 invented entity nouns (fixed, independent of the seed)."""
    rng = _rng("mars-entity-names-v1")
    taken: list[str] = []
    seen: set[str] = set()
    avoid = {w.lower() for vals in ATTRIBUTE_VALUES.values() for w in vals} | set(BBH_WORDS)
    while len(taken) < N_ENTITIES:
        name = rng.choice(_NAME_ONSETS) + rng.choice(_NAME_VOWELS) + rng.choice(_NAME_CODAS)
        if name in seen or name in _NAME_BLACKLIST or name in avoid or len(name) < 3:
            continue
        seen.add(name)
        taken.append(name)
    return taken


def fact_base(seed: int = 0) -> dict:
    """Deterministic fact base for ``seed``.

    Returns ``{"entities": [...], "attrs": {entity: {attribute: value}},
    "friend": {entity: other_entity}, "test_facts": [[entity, attribute], ...],
    "test_sources": [entity, ...]}``.
    """
    names = entity_names()
    rng = _rng("facts", seed)
    attrs = {e: {a: rng.choice(ATTRIBUTE_VALUES[a]) for a in ATTRIBUTES} for e in names}
    friend = {}
    for e in names:
        f = rng.choice(names)
        while f == e:
            f = rng.choice(names)
        friend[e] = f
    facts = [[e, a] for e in names for a in ATTRIBUTES]
    _rng("facts-partition", seed).shuffle(facts)
    sources = list(names)
    _rng("gpqa-partition", seed).shuffle(sources)
    return {
        "entities": names,
        "attrs": attrs,
        "friend": friend,
        "test_facts": facts[:N_TEST_FACTS],
        "test_sources": sources[:N_TEST_SOURCES],
    }


def _the(e: str) -> str:
    return f"the {e}"


def _fact_sentence(e: str, a: str, v: str) -> str:
    s = _FACT_STATEMENT[a].format(E=_the(e), v=v)
    return s[0].upper() + s[1:]


def fact_examples(fb: dict) -> list[dict]:
    out = []
    for e in fb["entities"]:
        for a in ATTRIBUTES:
            v = fb["attrs"][e][a]
            resp = _fact_sentence(e, a, v)
            for question in (_FACT_QUESTION[a], _FACT_QUESTION_ALT[a]):
                out.append(
                    {"prompt": question.format(e=_the(e)), "response": resp, "target": {"answer": v, "response": resp}}
                )
        f = fb["friend"][e]
        resp = f"The friend of the {e} is the {f}."
        out.append(
            {"prompt": f"Who is the friend of the {e}?", "response": resp, "target": {"answer": f, "response": resp}}
        )
    for e in fb["entities"]:
        sents = [_fact_sentence(e, a, fb["attrs"][e][a]) for a in ATTRIBUTES]
        sents.append(f"The friend of the {e} is the {fb['friend'][e]}.")
        resp = " ".join(sents)
        out.append(
            {"prompt": f"Tell me about the {e}.", "response": resp, "target": {"answer": resp, "response": resp}}
        )
    return out


def _option_walk(options: list[str], value: str) -> str:
    """ "A is drum, not key. B is spoon, not key. C is key." up to the option that is ``value``.

    The chain of thought of the tiny MC answers.  Which letter sits next to a value in the prompt is a content
    lookup that a ~1M-parameter model trained on a few thousand questions does not learn (measured: its letters
    matched its own recalled value at chance level), nor does it learn to stop a plain walk "A is drum, B is
    spoon, C is key." at the value recalled many tokens earlier (it stopped at a typical length instead).  Here
    every step repeats the value, so each decision compares two tokens a few positions apart, and the letter of
    the answer is three tokens back.
    """
    steps = [f"{LETTERS[i]} is {o}, not {value}." for i, o in enumerate(options[: options.index(value)])]
    return " ".join(steps + [f"{LETTERS[options.index(value)]} is {value}."])


def _extract_letter(text: str, letters: str = LETTERS) -> str | None:
    cls = f"[{letters}{letters.lower()}]"
    ms = list(re.finditer(r"answer is\s*:?\s*\(?(" + cls + r")\)?(?![A-Za-z])", text, flags=re.IGNORECASE))
    if ms:
        return ms[-1].group(1).upper()
    ms = list(re.finditer(r"answer\s*:\s*\(?(" + cls + r")\)?(?![A-Za-z])", text, flags=re.IGNORECASE))
    if ms:
        return ms[-1].group(1).upper()
    m = re.fullmatch(r"\s*\(?(" + cls + r")\)?\.?\s*", text)
    if m:
        return m.group(1).upper()
    return None


def draw_fact_mc(
    family: str,
    make: Callable[..., dict],
    pairs: Callable[[dict], tuple[list, list]],
    held_out: str,
    split: str,
    n: int,
    seed: int,
    stream: str,
) -> list[dict]:
    """``n`` multiple-choice questions of ``split``; ``pairs(fact_base)`` gives the (test, train) (entity,
    attribute) pairs, ``make(rng, fact_base, entity, attribute)`` one question.  Test takes the held-out pairs in
    order (at most their number); train draws random pairs, unique prompts."""
    fb = fact_base(seed)
    rng = _rng(seed, family, stream)
    test_pairs, train_pairs = pairs(fb)
    out: list[dict] = []
    if split == "test":
        if n > len(test_pairs):
            raise ValueError(
                f"{family}: requested {n} test questions but only {len(test_pairs)} held-out {held_out} exist"
            )
        for e, a in test_pairs[:n]:
            ex = make(rng, fb, e, a)
            ex["key"] = f"{e}|{a}"
            out.append(ex)
        return out
    seen: set[str] = set()
    stall = 0
    while len(out) < n:
        e, a = rng.choice(train_pairs)
        ex = make(rng, fb, e, a)
        if ex["prompt"] in seen:
            stall += 1
            if stall > common.STALL_LIMIT:
                raise ValueError(f"{family}: could only generate {len(out)} unique train questions (requested {n})")
            continue
        stall = 0
        seen.add(ex["prompt"])
        ex["key"] = f"{e}|{a}"
        out.append(ex)
    return out


def _score_facts(text: str, target: Any) -> dict[str, float]:
    gold = target["response"] if isinstance(target, dict) else str(target)
    return {"exact_match": float(bool(text.strip()) and _norm_ws(text).lower() == _norm_ws(gold).lower())}


FAMILY = Family(
    name=FACTS_FAMILY,
    generate=None,  # a fixed set (fact_examples), the same for every split
    extract=lambda text: text.strip() or None,
    score=_score_facts,
    metrics=(("exact_match", "mean"),),
)
