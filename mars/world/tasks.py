"""Synthetic instruction data shaped like the six MARS evaluation benchmarks.

The MARS replication trains a tiny (~1-3M parameter) Qwen2-architecture model
from scratch on a 2-core CPU.  The real benchmarks (IFEval, BBH, MMLU-Pro,
GPQA, GSM8K, HumanEval) are far beyond such a model, so this module generates
small, closed-vocabulary stand-ins that keep each benchmark's *format* and
*scoring rule* while being learnable from a few thousand short examples.
Every prompt+response is short (roughly 15-90 whitespace-separated words) and
mixes predictable spans (templated phrases, code boilerplate, "So the answer
is") with hard tokens (numbers, letters, computed values).

Families (exact names in :data:`FAMILIES`):

``ifeval``
    "Write a short note about cats." plus one or two verifiable instructions
    drawn from: all lowercase, all capitals, include a keyword, end with an
    exact phrase, exactly N "* " bullet points, wrap in double quotes, exactly
    N sentences, start with a given word.  Instruction ids and checker logic
    follow IFEval (``change_case:english_lowercase``, ``keywords:existence``,
    ``startend:end_checker``, ``detectable_format:number_bullet_lists`` ...),
    scored "strict": ``prompt_level_strict_acc`` (all instructions pass) and
    ``inst_level_strict_acc`` (passed/total for this prompt), plus the raw
    counts ``inst_passed`` / ``inst_total`` so an aggregator can compute the
    true instruction-level mean (sum passed / sum total) as IFEval does.
``bbh``
    Five BIG-Bench-Hard-like subtasks with a short chain of thought ending in
    "So the answer is X.": boolean_expressions, word_sorting,
    multistep_arithmetic, dyck_languages, object_counting.  As in lm-eval's
    BBH CoT tasks the answer is the text after "the answer is" (final period
    removed) and ``exact_match`` ignores case and surrounding whitespace.
``mmlu_pro``
    10-option (A-J) multiple choice over a synthetic, seed-dependent FACT
    BASE (100 invented entities such as "the zorp", each with a color, home
    city, food and carried object, plus a "friend" entity).  Answer format and
    extraction follow MMLU-Pro: "... The answer is (D)."; ``exact_match`` on
    the letter.  The answer's short chain of thought recalls the fact, then
    walks the options up to it ("The zorp is blue. A is red, not blue. B is
    blue. The answer is (B).", see :func:`_option_walk`).  The facts
    themselves are taught by separate fact-teaching examples (family ``"facts"``, see below) for ALL facts; exactly 100 facts
    are reserved for test MC questions, which therefore never appear as MC
    questions in train (the model must transfer a taught fact to MC format).
``gpqa``
    Harder 4-option (A-D) two-hop questions over the same fact base, in
    lm-eval's GPQA CoT prompt style: "What color is the friend of the zorp?"
    -> "The friend of the zorp is the blick. The blick is blue. A is red, not
    blue. B is blue. The answer is (B)."  One distractor is the 1-hop trap
    (the zorp's own color) when it differs.  25 source entities are reserved for test (100 questions); train
    2-hop questions use only the other source entities.  ``exact_match``.
``gsm8k``
    Two/three-step arithmetic word problems with small numbers and worked
    steps, final line "#### N".  ``exact_match`` is lm-eval's strict match
    (number after "####"); ``exact_match_flexible`` is the flexible extract
    (last number in the text).
``humaneval``
    "Write a Python function `add_three(x)` that returns x plus 3." -> a
    fenced ```python block.  ``target`` holds HumanEval-style tests
    (``def check(candidate): assert ...`` then ``check(entry_point)``); scoring
    extracts the code (first fenced block, else the whole text), appends the
    tests and runs the program with :func:`mars.sandbox.run_python`; metric
    ``pass@1``.

Fact teaching: the training split additionally contains fact-teaching
examples under the separate family name ``"facts"`` (:data:`FACTS_FAMILY`,
not part of :data:`FAMILIES`, not counted in ``n_train_per_family``): one
question per (entity, attribute) in two phrasings ("What color is the zorp?",
"Tell me the color of the zorp."), one "Who is the friend of ..." per entity
and one "Tell me about ..." summary per entity (1000 examples): three
exposures of each fact per epoch instead of two, and no test MC question is
among them.  ``score`` accepts
``"facts"`` too (exact match of the whole answer sentence).

BBH in context: the tiny BBH task is 1-shot (``mars.eval_tasks.FEWSHOT``), the
shot a user/assistant turn before the question.  A model that never saw a
multi-turn prompt in SFT answers those badly, so every second bbh training
record past the first three of its subtask (the evaluation's shots) carries a
``messages`` context: the first record of its subtask as a solved turn, then
its own question.

Splits: for the generated families (ifeval, bbh, gsm8k, humaneval) every
problem has an *underlying key* (e.g. the numbers of a word problem without
the names, the function and constants without the identifier names); a
seed-dependent hash sends 1/4 of the key space to test (humaneval templates
without constants, e.g. "max of a list", always stay in train, so test
problems are unseen constants of templates that train teaches).  Train examples are
drawn only from train keys (unique prompts), test examples only from test keys
(unique keys), so train and test never share an underlying problem, and
:func:`few_shot_examples` (which draws from the train side) never leaks test
problems.  Generation is a deterministic stream per (seed, family, split):
asking for more examples extends the list (smaller sizes are prefixes).

Everything is deterministic in ``seed`` (``random.Random`` seeded with
strings, no set iteration), standard library only.
"""

from __future__ import annotations

import hashlib
import random
import re
from typing import Any, Callable

FAMILIES: tuple[str, ...] = ("ifeval", "bbh", "mmlu_pro", "gpqa", "gsm8k", "humaneval")
FACTS_FAMILY = "facts"
TEST_FRACTION_DENOM = 4  # 1/4 of the underlying key space is reserved for test
HUMANEVAL_TIMEOUT_S = 5.0
_STALL_LIMIT = 4000  # consecutive draws without a new example before giving up

# --------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------


def _rng(*parts: Any) -> random.Random:
    return random.Random("|".join(str(p) for p in parts))


def _hash_int(*parts: Any) -> int:
    h = hashlib.sha256("|".join(str(p) for p in parts).encode("utf-8")).hexdigest()
    return int(h[:16], 16)


def _is_test_key(seed: int, family: str, key: str) -> bool:
    # A key ending in "|" has no free parameters (e.g. the humaneval "max of a
    # list" template): it always stays in train, so every test problem is a
    # new instance of a template that train teaches.
    if key.endswith("|"):
        return False
    return _hash_int("split", seed, family, key) % TEST_FRACTION_DENOM == 0


def _as_text(completion: Any) -> str:
    return completion if isinstance(completion, str) else ""


LETTERS = "ABCDEFGHIJ"

NUMBER_WORDS = [
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
    "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen",
    "seventeen", "eighteen", "nineteen", "twenty",
]

# --------------------------------------------------------------------------
# 1. ifeval
# --------------------------------------------------------------------------

IFEVAL_TOPICS: dict[str, list[str]] = {
    "cats": ["Cats are soft.", "They sleep a lot.", "Cats like to play.", "Many people love cats."],
    "dogs": ["Dogs are loyal.", "They like long walks.", "Dogs love to run.", "A dog is a good pet."],
    "rain": ["Rain falls from clouds.", "It makes the ground wet.", "Plants need rain.", "Rain can be loud."],
    "the sea": ["The sea is big.", "It is full of fish.", "The sea has waves.", "People swim in the sea."],
    "music": ["Music is fun.", "It can make us dance.", "Music has a beat.", "Many people sing along."],
    "bread": ["Bread is made from flour.", "It is baked in an oven.", "Bread tastes good.", "People eat bread every day."],
    "trains": ["Trains run on tracks.", "They carry many people.", "Trains can be fast.", "Some trains are very long."],
    "the moon": ["The moon shines at night.", "It goes around the earth.", "The moon has no air.", "It looks round and white."],
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
    I_LOWER, I_UPPER, I_KEYWORD, I_END, I_BULLETS, I_QUOTES, I_SENTENCES, I_FIRST_WORD,
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
    value = text.strip().lstrip('"\'*').strip()
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
        return f"End with the exact phrase \"{kw['end_phrase']}\""
    if inst == I_BULLETS:
        return f"Use exactly {kw['num_bullets']} bullet points like \"* point\"."
    if inst == I_QUOTES:
        return "Wrap your entire answer in double quotes."
    if inst == I_SENTENCES:
        return f"Write exactly {kw['num_sentences']} sentences."
    if inst == I_FIRST_WORD:
        return f"Start your answer with the word \"{kw['first_word']}\"."
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


# --------------------------------------------------------------------------
# 2. bbh
# --------------------------------------------------------------------------

BBH_SUBTASKS: tuple[str, ...] = (
    "boolean_expressions", "word_sorting", "multistep_arithmetic", "dyck_languages", "object_counting",
)
_COT = "Let's think step by step."
BBH_WORDS = [
    "ant", "bell", "cup", "dog", "egg", "fox", "gem", "hat", "ink", "jam", "kite", "lamp", "map",
    "nest", "owl", "pen", "quiz", "rug", "sun", "top", "urn", "van", "web", "yak", "zoo", "bag",
    "cat", "dot", "fan", "gum", "hen", "jar", "key", "log", "mud", "nut", "oak", "pot", "rat",
    "sky", "tea", "vet", "wax",
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
    prompt = ("Complete the rest of the sequence, making sure that the parentheses are closed "
              f"properly. Input: {inp}")
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
    return f"{sub}|{key}", {"prompt": prompt, "response": response,
                            "target": {"subtask": sub, "answer": answer}}


def _norm_ws(s: str) -> str:
    return " ".join(s.split())


def _extract_bbh(text: str) -> str | None:
    matches = list(re.finditer(r"answer is", text, flags=re.IGNORECASE))
    if not matches:
        return None
    ans = text[matches[-1].end():].split("\n", 1)[0].strip()
    if ans.startswith(":"):
        ans = ans[1:].strip()
    if ans.endswith("."):
        ans = ans[:-1].strip()
    ans = _norm_ws(ans)
    return ans or None


# --------------------------------------------------------------------------
# 3/4. fact base, mmlu_pro, gpqa
# --------------------------------------------------------------------------

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
    "blink", "brink", "drink", "flask", "plank", "trunk", "skunk", "drift", "graft", "blob", "glob",
    "grub", "frog", "flog", "plug", "drug", "slug", "snug", "jug", "wig", "wag", "zig", "zag", "jog",
    "kink", "wink", "zinc", "vex", "wax", "jab", "job", "web", "wok", "kelp", "jerk", "work", "lurk",
    "drub", "grab", "drab", "krab", "grog", "blog", "flab", "flub", "glib", "grob", "trob",
    "plonk", "clonk", "klunk", "gronk", "trek", "trox", "flax", "flex", "flux", "blix", "box",
    "dunk", "junk", "wonk", "bonk", "honk", "zonk", "sank", "snob", "snag", "swig", "twig",
    "grex", "jinx", "lynx", "tusk", "dusk", "husk", "musk", "whisk", "kiosk", "kook", "book",
    "wool", "woog", "zoom", "woof", "wisk", "trag", "trig", "drag", "flag", "glug", "plob", "krik",
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
    return {"entities": names, "attrs": attrs, "friend": friend,
            "test_facts": facts[:N_TEST_FACTS], "test_sources": sources[:N_TEST_SOURCES]}


def _the(e: str) -> str:
    return f"the {e}"


def _fact_sentence(e: str, a: str, v: str) -> str:
    s = _FACT_STATEMENT[a].format(E=_the(e), v=v)
    return s[0].upper() + s[1:]


def _fact_examples(fb: dict) -> list[dict]:
    out = []
    for e in fb["entities"]:
        for a in ATTRIBUTES:
            v = fb["attrs"][e][a]
            resp = _fact_sentence(e, a, v)
            for question in (_FACT_QUESTION[a], _FACT_QUESTION_ALT[a]):
                out.append({"prompt": question.format(e=_the(e)), "response": resp,
                            "target": {"answer": v, "response": resp}})
        f = fb["friend"][e]
        resp = f"The friend of the {e} is the {f}."
        out.append({"prompt": f"Who is the friend of the {e}?", "response": resp,
                    "target": {"answer": f, "response": resp}})
    for e in fb["entities"]:
        sents = [_fact_sentence(e, a, fb["attrs"][e][a]) for a in ATTRIBUTES]
        sents.append(f"The friend of the {e} is the {fb['friend'][e]}.")
        resp = " ".join(sents)
        out.append({"prompt": f"Tell me about the {e}.", "response": resp,
                    "target": {"answer": resp, "response": resp}})
    return out


def _option_walk(options: list[str], value: str) -> str:
    """"A is drum, not key. B is spoon, not key. C is key." up to the option that is ``value``.

    The chain of thought of the tiny MC answers.  Which letter sits next to a value in the prompt is a content
    lookup that a ~1M-parameter model trained on a few thousand questions does not learn (measured: its letters
    matched its own recalled value at chance level), nor does it learn to stop a plain walk "A is drum, B is
    spoon, C is key." at the value recalled many tokens earlier (it stopped at a typical length instead).  Here
    every step repeats the value, so each decision compares two tokens a few positions apart, and the letter of
    the answer is three tokens back.
    """
    steps = [f"{LETTERS[i]} is {o}, not {value}." for i, o in enumerate(options[: options.index(value)])]
    return " ".join(steps + [f"{LETTERS[options.index(value)]} is {value}."])


def _mmlu_question(rng: random.Random, fb: dict, e: str, a: str) -> dict:
    v = fb["attrs"][e][a]
    options = list(ATTRIBUTE_VALUES[a])
    rng.shuffle(options)
    letter = LETTERS[options.index(v)]
    lines = [f"{LETTERS[i]}. {o}" for i, o in enumerate(options)]
    prompt = ("Answer the multiple choice question.\nQuestion: " + _FACT_QUESTION[a].format(e=_the(e))
              + "\nOptions:\n" + "\n".join(lines))
    response = f"{_fact_sentence(e, a, v)} {_option_walk(options, v)} The answer is ({letter})."
    return {"prompt": prompt, "response": response,
            "target": {"answer": letter, "options": options, "entity": e, "attribute": a, "value": v}}


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
    prompt = ("What is the correct answer to this question: " + _TWO_HOP_QUESTION[a].format(e=e)
              + "\nChoices:\n" + "\n".join(f"({LETTERS[i]}) {o}" for i, o in enumerate(options)))
    response = (f"The friend of the {e} is the {f}. {_fact_sentence(f, a, v)} {_option_walk(options, v)} "
                f"The answer is ({letter}).")
    return {"prompt": prompt, "response": response,
            "target": {"answer": letter, "options": options, "entity": e, "friend": f,
                       "attribute": a, "value": v}}


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


# --------------------------------------------------------------------------
# 5. gsm8k
# --------------------------------------------------------------------------

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
        prompt = (f"{n} has {a} {it}. {P} buys {b} bags with {c} {it} in each bag. "
                  f"How many {it} does {n} have now?")
        steps = [f"{P} buys {b} * {c} = {bc} {it}.", f"{n} has {a} + {bc} = {ans} {it}."]
        nums = (a, b, c)
    elif t == 2:
        a = rng.randint(5, 20)
        b, c = rng.randint(1, a - 1), rng.randint(1, 9)
        x = a - b
        ans = x + c
        prompt = (f"{n} has {a} {it}. {P} gives {b} to {m}. Then {p} finds {c} more. "
                  f"How many {it} does {n} have now?")
        steps = [f"After giving, {n} has {a} - {b} = {x} {it}.", f"Then {n} has {x} + {c} = {ans} {it}."]
        nums = (a, b, c)
    elif t == 3:
        a, b = rng.randint(2, 5), rng.randint(2, 5)
        ab = a * b
        c = rng.randint(1, ab - 1)
        ans = ab - c
        prompt = (f"{n} has {a} boxes. Each box holds {b} {it}. {P} uses {c} of the {it}. "
                  f"How many {it} are left?")
        steps = [f"There are {a} * {b} = {ab} {it}.", f"{ab} - {c} = {ans} {it} are left."]
        nums = (a, b, c)
    elif t == 4:
        a, b = rng.randint(2, 6), rng.randint(2, 5)
        ab = a * b
        c = rng.randint(1, ab - 1)
        ans = ab - c
        prompt = (f"{n} earns {a} dollars each day for {b} days. Then {p} spends {c} dollars. "
                  f"How many dollars does {n} have left?")
        steps = [f"{P} earns {a} * {b} = {ab} dollars.", f"{P} has {ab} - {c} = {ans} dollars left."]
        nums = (a, b, c)
    elif t == 5:
        a, b = rng.randint(2, 15), rng.randint(1, 9)
        x = a + b
        ans = a + x
        prompt = (f"{n} has {a} {it}. {m} has {b} more {it} than {n}. "
                  f"How many {it} do they have together?")
        steps = [f"{m} has {a} + {b} = {x} {it}.", f"Together they have {a} + {x} = {ans} {it}."]
        nums = (a, b)
    elif t == 6:
        a, b, c = rng.randint(2, 6), rng.randint(2, 4), rng.randint(1, 9)
        tot = a * b
        ans = a + c
        prompt = (f"{n} has {tot} {it} and shares them equally among {b} friends. "
                  f"Then each friend gets {c} more. How many {it} does each friend have?")
        steps = [f"Each friend gets {tot} / {b} = {a} {it}.", f"Then each friend has {a} + {c} = {ans} {it}."]
        nums = (a, b, c)
    else:
        a, b = rng.randint(2, 4), rng.randint(3, 6)
        ab = a * b
        c = rng.randint(1, ab // 2)
        d = rng.randint(1, ab - c - 1)
        cd = c + d
        ans = ab - cd
        prompt = (f"{n} buys {a} packs of {b} {it}. {P} gives {c} to {m} and {d} to {k2}. "
                  f"How many {it} does {n} have left?")
        steps = [f"{P} buys {a} * {b} = {ab} {it}.", f"{P} gives away {c} + {d} = {cd} {it}.",
                 f"{ab} - {cd} = {ans} {it} are left."]
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


# --------------------------------------------------------------------------
# 6. humaneval
# --------------------------------------------------------------------------

_INT_PARAMS = ["x", "n", "a", "num"]
_LIST_PARAMS = ["xs", "nums", "items", "values"]
_STR_PARAMS = ["s", "text", "word"]
_STR_POOL = ["cat", "hello", "abc", "python", "sun", "level", "code", "moon"]


def _ints(rng: random.Random, k: int = 3, lo: int = 0, hi: int = 20) -> list[int]:
    return rng.sample(range(lo, hi + 1), k)


def _lists(rng: random.Random, k: int = 3, lo: int = 0, hi: int = 20, must: int | None = None) -> list[list[int]]:
    out = []
    for i in range(k):
        xs = [rng.randint(lo, hi) for _ in range(rng.randint(3, 6))]
        if must is not None and i < 2:
            xs[rng.randrange(len(xs))] = must
        out.append(xs)
    return out


def _strs(rng: random.Random, k: int = 3) -> list[str]:
    return rng.sample(_STR_POOL, k)


# each template: (kind, const spec, names, description, body, reference, input maker)
# kind: "int" / "list" / "str" -> which parameter names are used
# consts: list of (low, high) ranges for the constants a, b (empty = none)
_HE_TEMPLATES: list[dict] = [
    dict(id="add", kind="int", consts=[(1, 20)], names=["add_{wa}", "plus_{wa}"],
         desc="returns {p} plus {a}", body="return {p} + {a}", ref=lambda x, a, b: x + a,
         inputs=lambda r, a, b: _ints(r)),
    dict(id="sub", kind="int", consts=[(1, 20)], names=["subtract_{wa}", "minus_{wa}"],
         desc="returns {p} minus {a}", body="return {p} - {a}", ref=lambda x, a, b: x - a,
         inputs=lambda r, a, b: _ints(r)),
    dict(id="times", kind="int", consts=[(2, 20)], names=["times_{wa}", "multiply_by_{wa}"],
         desc="returns {p} times {a}", body="return {p} * {a}", ref=lambda x, a, b: x * a,
         inputs=lambda r, a, b: _ints(r)),
    dict(id="lin_plus", kind="int", consts=[(2, 9), (1, 20)], names=["scale_and_add", "linear", "affine"],
         desc="returns {p} times {a} plus {b}", body="return {p} * {a} + {b}",
         ref=lambda x, a, b: x * a + b, inputs=lambda r, a, b: _ints(r)),
    dict(id="lin_minus", kind="int", consts=[(2, 9), (1, 20)], names=["scale_and_subtract", "transform"],
         desc="returns {p} times {a} minus {b}", body="return {p} * {a} - {b}",
         ref=lambda x, a, b: x * a - b, inputs=lambda r, a, b: _ints(r)),
    dict(id="divisible", kind="int", consts=[(2, 20)], names=["is_divisible_by_{wa}", "divides_by_{wa}"],
         desc="returns True if {p} is divisible by {a}, else False", body="return {p} % {a} == 0",
         ref=lambda x, a, b: x % a == 0, inputs=lambda r, a, b: [a * r.randint(1, 5), a * r.randint(1, 5) + 1, r.randint(0, 40)]),
    dict(id="count_value", kind="list", consts=[(0, 20)], names=["count_{wa}", "how_many_{wa}"],
         desc="returns how many times {a} appears in the list {p}", body="return {p}.count({a})",
         ref=lambda xs, a, b: xs.count(a), inputs=lambda r, a, b: _lists(r, must=a)),
    dict(id="count_greater", kind="list", consts=[(1, 20)], names=["count_above_{wa}", "count_greater_than_{wa}"],
         desc="returns how many numbers in the list {p} are greater than {a}",
         body="count = 0\n    for x in {p}:\n        if x > {a}:\n            count += 1\n    return count",
         ref=lambda xs, a, b: sum(1 for x in xs if x > a), inputs=lambda r, a, b: _lists(r, hi=25)),
    dict(id="count_less", kind="list", consts=[(1, 20)], names=["count_below_{wa}", "count_less_than_{wa}"],
         desc="returns how many numbers in the list {p} are less than {a}",
         body="count = 0\n    for x in {p}:\n        if x < {a}:\n            count += 1\n    return count",
         ref=lambda xs, a, b: sum(1 for x in xs if x < a), inputs=lambda r, a, b: _lists(r, hi=25)),
    dict(id="filter_greater", kind="list", consts=[(1, 20)], names=["keep_above_{wa}", "filter_greater_than_{wa}"],
         desc="returns a list of the numbers in {p} that are greater than {a}",
         body="return [x for x in {p} if x > {a}]",
         ref=lambda xs, a, b: [x for x in xs if x > a], inputs=lambda r, a, b: _lists(r, hi=25)),
    dict(id="filter_less", kind="list", consts=[(1, 20)], names=["keep_below_{wa}", "filter_less_than_{wa}"],
         desc="returns a list of the numbers in {p} that are less than {a}",
         body="return [x for x in {p} if x < {a}]",
         ref=lambda xs, a, b: [x for x in xs if x < a], inputs=lambda r, a, b: _lists(r, hi=25)),
    dict(id="add_each", kind="list", consts=[(1, 20)], names=["add_{wa}_to_each", "shift_by_{wa}"],
         desc="returns a new list with {a} added to each number in {p}",
         body="return [x + {a} for x in {p}]",
         ref=lambda xs, a, b: [x + a for x in xs], inputs=lambda r, a, b: _lists(r)),
    dict(id="times_each", kind="list", consts=[(2, 20)], names=["multiply_each_by_{wa}", "scale_by_{wa}"],
         desc="returns a new list with each number in {p} multiplied by {a}",
         body="return [x * {a} for x in {p}]",
         ref=lambda xs, a, b: [x * a for x in xs], inputs=lambda r, a, b: _lists(r)),
    dict(id="repeat", kind="str", consts=[(2, 5)], names=["repeat_{wa}_times", "copy_{wa}_times"],
         desc="returns the string {p} repeated {a} times", body="return {p} * {a}",
         ref=lambda s, a, b: s * a, inputs=lambda r, a, b: _strs(r)),
    dict(id="max", kind="list", consts=[], names=["find_max", "get_max", "largest"],
         desc="returns the largest number in the list {p}", body="return max({p})",
         ref=lambda xs, a, b: max(xs), inputs=lambda r, a, b: _lists(r)),
    dict(id="min", kind="list", consts=[], names=["find_min", "get_min", "smallest"],
         desc="returns the smallest number in the list {p}", body="return min({p})",
         ref=lambda xs, a, b: min(xs), inputs=lambda r, a, b: _lists(r)),
    dict(id="sum", kind="list", consts=[], names=["sum_list", "total"],
         desc="returns the sum of the numbers in the list {p}", body="return sum({p})",
         ref=lambda xs, a, b: sum(xs), inputs=lambda r, a, b: _lists(r)),
    dict(id="product", kind="list", consts=[], names=["product", "multiply_all"],
         desc="returns the product of the numbers in the list {p}",
         body="result = 1\n    for x in {p}:\n        result *= x\n    return result",
         ref=lambda xs, a, b: _prod(xs), inputs=lambda r, a, b: _lists(r, hi=6)),
    dict(id="count_even", kind="list", consts=[], names=["count_even", "num_even"],
         desc="returns how many even numbers are in the list {p}",
         body="count = 0\n    for x in {p}:\n        if x % 2 == 0:\n            count += 1\n    return count",
         ref=lambda xs, a, b: sum(1 for x in xs if x % 2 == 0), inputs=lambda r, a, b: _lists(r)),
    dict(id="last", kind="list", consts=[], names=["last_item", "get_last"],
         desc="returns the last element of the list {p}", body="return {p}[-1]",
         ref=lambda xs, a, b: xs[-1], inputs=lambda r, a, b: _lists(r)),
    dict(id="first", kind="list", consts=[], names=["first_item", "get_first"],
         desc="returns the first element of the list {p}", body="return {p}[0]",
         ref=lambda xs, a, b: xs[0], inputs=lambda r, a, b: _lists(r)),
    dict(id="reverse", kind="str", consts=[], names=["reverse_string", "flip"],
         desc="returns the string {p} reversed", body="return {p}[::-1]",
         ref=lambda s, a, b: s[::-1], inputs=lambda r, a, b: _strs(r)),
    dict(id="upper", kind="str", consts=[], names=["to_upper", "shout"],
         desc="returns the string {p} in capital letters", body="return {p}.upper()",
         ref=lambda s, a, b: s.upper(), inputs=lambda r, a, b: _strs(r)),
    dict(id="length", kind="str", consts=[], names=["length", "count_chars"],
         desc="returns the number of characters in the string {p}", body="return len({p})",
         ref=lambda s, a, b: len(s), inputs=lambda r, a, b: _strs(r)),
    dict(id="is_even", kind="int", consts=[], names=["is_even", "check_even"],
         desc="returns True if {p} is even, else False", body="return {p} % 2 == 0",
         ref=lambda x, a, b: x % 2 == 0, inputs=lambda r, a, b: [2 * r.randint(0, 9), 2 * r.randint(0, 9) + 1, r.randint(0, 20)]),
    dict(id="is_odd", kind="int", consts=[], names=["is_odd", "check_odd"],
         desc="returns True if {p} is odd, else False", body="return {p} % 2 == 1",
         ref=lambda x, a, b: x % 2 == 1, inputs=lambda r, a, b: [2 * r.randint(0, 9), 2 * r.randint(0, 9) + 1, r.randint(0, 20)]),
    dict(id="square", kind="int", consts=[], names=["square", "squared"],
         desc="returns {p} squared", body="return {p} * {p}",
         ref=lambda x, a, b: x * x, inputs=lambda r, a, b: _ints(r, hi=12)),
]


def _prod(xs: list[int]) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


_PARAMS_BY_KIND = {"int": _INT_PARAMS, "list": _LIST_PARAMS, "str": _STR_PARAMS}


def _gen_humaneval(rng: random.Random, **_: Any) -> tuple[str, dict]:
    tpl = rng.choice(_HE_TEMPLATES)
    consts = [rng.randint(lo, hi) for lo, hi in tpl["consts"]]
    a = consts[0] if consts else None
    b = consts[1] if len(consts) > 1 else None
    p = rng.choice(_PARAMS_BY_KIND[tpl["kind"]])
    name = rng.choice(tpl["names"]).format(wa=NUMBER_WORDS[a] if a is not None and a <= 20 else a)
    desc = tpl["desc"].format(p=p, a=a, b=b)
    prompt = f"Write a Python function `{name}({p})` that {desc}."
    body = tpl["body"].format(p=p, a=a, b=b)
    code = f"def {name}({p}):\n    {body}\n"
    response = f"```python\n{code}```"
    asserts = []
    for x in tpl["inputs"](rng, a, b):
        expected = tpl["ref"](x, a, b)
        asserts.append(f"    assert candidate({x!r}) == {expected!r}")
    test = "def check(candidate):\n" + "\n".join(asserts) + f"\n\n\ncheck({name})\n"
    key = f"{tpl['id']}|" + ",".join(map(str, consts))
    return key, {"prompt": prompt, "response": response,
                 "target": {"entry_point": name, "test": test}}


def extract_code(completion: str) -> str:
    """First fenced code block (```python / ```py / ```), else the whole text.

    An unterminated fence (truncated generation) yields everything after it.
    """
    text = _as_text(completion)
    m = re.search(r"```[ \t]*(?:python|py|Python)?[ \t]*\n(.*?)(?:```|\Z)", text, flags=re.DOTALL)
    if m:
        return m.group(1)
    return text


def _score_humaneval(completion: str, target: Any) -> dict[str, float]:
    code = extract_code(completion)
    if not code.strip():
        return {"pass@1": 0.0}
    test = target["test"] if isinstance(target, dict) else str(target)
    from mars.sandbox import run_tests  # lazy: a missing sandbox is an error, not a 0 score

    return {"pass@1": float(run_tests(code, test, timeout_s=HUMANEVAL_TIMEOUT_S))}


# --------------------------------------------------------------------------
# split generation
# --------------------------------------------------------------------------

_GENERATORS: dict[str, Callable[..., tuple[str, dict]]] = {
    "ifeval": _gen_ifeval,
    "bbh": _gen_bbh,
    "gsm8k": _gen_gsm8k,
    "humaneval": _gen_humaneval,
}


def _check_size(name: str, n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, int):
        raise ValueError(f"{name} must be an int, got {n!r}")
    if n < 0:
        raise ValueError(f"{name} must be >= 0, got {n}")
    return n


def _draw_generated(family: str, split: str, n: int, seed: int, stream: str, **gen_kw: Any) -> list[dict]:
    gen = _GENERATORS[family]
    rng = _rng(seed, family, stream)
    want_test = split == "test"
    out: list[dict] = []
    seen: set[str] = set()
    stall = 0
    while len(out) < n:
        key, ex = gen(rng, **gen_kw)
        if _is_test_key(seed, family, key) != want_test:
            continue  # other split's problem: does not count as a stall
        ident = key if want_test else ex["prompt"]
        if ident in seen:
            stall += 1
            if stall > _STALL_LIMIT:
                raise ValueError(
                    f"{family}: could only generate {len(out)} unique {split} problems "
                    f"(requested {n}); the {family} {split} space is exhausted, request fewer")
            continue
        stall = 0
        seen.add(ident)
        ex["key"] = key
        out.append(ex)
    return out


def _draw_fact_mc(family: str, split: str, n: int, seed: int, stream: str) -> list[dict]:
    fb = fact_base(seed)
    rng = _rng(seed, family, stream)
    make = _mmlu_question if family == "mmlu_pro" else _gpqa_question
    if family == "mmlu_pro":
        test_pairs = [tuple(x) for x in fb["test_facts"]]
        test_set = set(test_pairs)
        train_pairs = [(e, a) for e in fb["entities"] for a in ATTRIBUTES if (e, a) not in test_set]
    else:
        test_src = set(fb["test_sources"])
        test_pairs = [(e, a) for e in fb["test_sources"] for a in ATTRIBUTES]
        train_pairs = [(e, a) for e in fb["entities"] for a in ATTRIBUTES if e not in test_src]
    out: list[dict] = []
    if split == "test":
        if n > len(test_pairs):
            raise ValueError(
                f"{family}: requested {n} test questions but only {len(test_pairs)} held-out "
                f"{'facts' if family == 'mmlu_pro' else 'source-entity/attribute pairs'} exist")
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
            if stall > _STALL_LIMIT:
                raise ValueError(f"{family}: could only generate {len(out)} unique train questions "
                                 f"(requested {n})")
            continue
        stall = 0
        seen.add(ex["prompt"])
        ex["key"] = f"{e}|{a}"
        out.append(ex)
    return out


def _draw(family: str, split: str, n: int, seed: int, stream: str, **kw: Any) -> list[dict]:
    if family in ("mmlu_pro", "gpqa"):
        return _draw_fact_mc(family, split, n, seed, stream)
    return _draw_generated(family, split, n, seed, stream, **kw)


def _finish(family: str, split: str, exs: list[dict], tag: str | None = None) -> list[dict]:
    out = []
    for i, ex in enumerate(exs):
        ident = f"{family}/{tag or split}/{i:05d}"
        out.append({"family": family, "id": ident, "prompt": ex["prompt"],
                    "response": ex["response"], "target": ex["target"]})
    return out


def make_splits(n_train_per_family: int, n_test_per_family: int, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """Deterministic (train, test) example lists.

    ``train`` holds ``n_train_per_family`` examples of each family in
    :data:`FAMILIES` order, followed by the 1000 fact-teaching examples of
    family ``"facts"``; ``test`` holds ``n_test_per_family`` examples of each
    family.  Each example: ``{"family", "id", "prompt", "response", "target"}``.
    mmlu_pro and gpqa allow at most 100 test questions; the other families
    raise ValueError when their problem space is exhausted (test capacity is
    seed-dependent: humaneval ~120-150, ifeval ~800, gsm8k/bbh thousands;
    train: humaneval ~3.6k unique prompts, ifeval ~18k, others far more).
    """
    n_train = _check_size("n_train_per_family", n_train_per_family)
    n_test = _check_size("n_test_per_family", n_test_per_family)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int, got {seed!r}")
    for fam, cap in (("mmlu_pro", N_TEST_FACTS), ("gpqa", N_TEST_SOURCES * len(ATTRIBUTES))):
        if n_test > cap:
            raise ValueError(f"{fam}: requested {n_test} test questions per family but the fact base "
                             f"only holds {cap} held-out questions (n_test_per_family <= {cap})")
    train: list[dict] = []
    test: list[dict] = []
    for fam in FAMILIES:
        test += _finish(fam, "test", _draw(fam, "test", n_test, seed, "test"))
        fam_train = _finish(fam, "train", _draw(fam, "train", n_train, seed, "train"))
        train += _with_bbh_shot_context(fam_train) if fam == "bbh" else fam_train
    train += _finish(FACTS_FAMILY, "train", _fact_examples(fact_base(seed)))
    return train, test


def make_pretrain(n_per_family: int, seed: int = 0) -> list[dict]:
    """The base model's plain-LM corpus: ``n_per_family`` fresh problems of every family, then the fact examples.

    Drawn from the TRAIN side of each family's key space on a stream of its own ("pretrain"), so no test problem
    is among them; a prompt may coincide with an SFT record's, as web text overlaps SFT data.  This is the tiny
    world's pre-training: a fixed SFT set of a few hundred examples per family is memorised long before a small
    model learns to copy from its prompt, look an option up or multiply; fresh problems teach those skills.
    """
    n = _check_size("n_per_family", n_per_family)
    out: list[dict] = []
    for fam in FAMILIES:
        records = _finish(fam, "pretrain", _draw(fam, "train", n, seed, "pretrain"))
        out += _with_bbh_shot_context(records) if fam == "bbh" else records
    return out + _finish(FACTS_FAMILY, "pretrain", _fact_examples(fact_base(seed)))


BBH_EVAL_SHOTS = 3  # records per subtask left plain: lm-eval's first_n sampler may take them as shots


def _with_bbh_shot_context(records: list[dict]) -> list[dict]:
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
            rec = dict(rec, messages=[{"role": "user", "content": shot["prompt"]},
                                      {"role": "assistant", "content": shot["response"]},
                                      {"role": "user", "content": rec["prompt"]}])
        out.append(rec)
    return out


def few_shot_examples(family: str, k: int, seed: int = 0, subtask: str | None = None) -> list[dict]:
    """``k`` examples from the TRAIN side of ``family`` (never a test problem).

    Drawn from their own deterministic stream (so they usually differ from the
    first training examples).  ``subtask`` restricts bbh shots to one subtask,
    as BBH's per-subtask 3-shot prompts do.
    """
    k = _check_size("k", k)
    if family == FACTS_FAMILY:
        exs = _fact_examples(fact_base(seed))
        _rng(seed, family, "fewshot").shuffle(exs)
        if k > len(exs):
            raise ValueError(f"facts: only {len(exs)} fact examples exist, requested {k}")
        return _finish(family, "fewshot", exs[:k])
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; expected one of {FAMILIES + (FACTS_FAMILY,)}")
    kw: dict[str, Any] = {}
    if subtask is not None:
        if family != "bbh" or subtask not in BBH_SUBTASKS:
            raise ValueError(f"subtask {subtask!r} is only valid for bbh, one of {BBH_SUBTASKS}")
        kw["subtask"] = subtask
    stream = "fewshot" if subtask is None else f"fewshot-{subtask}"
    return _finish(family, "train", _draw(family, "train", k, seed, stream, **kw), tag="fewshot")


# --------------------------------------------------------------------------
# extraction and scoring
# --------------------------------------------------------------------------


def extract_answer(family: str, completion: str) -> str | None:
    """The string the family's main metric compares (None if nothing found).

    ifeval: the stripped response; bbh: text after the last "answer is" (final
    period dropped, whitespace collapsed); mmlu_pro/gpqa: the upper-case
    letter; gsm8k: the strict "#### N" number (normalised); humaneval: the
    extracted code; facts: the stripped response.
    """
    text = _as_text(completion)
    if family in ("ifeval", FACTS_FAMILY):
        return text.strip() or None
    if family == "bbh":
        return _extract_bbh(text)
    if family == "mmlu_pro":
        return _extract_letter(text, LETTERS)
    if family == "gpqa":
        return _extract_letter(text, LETTERS[:4])
    if family == "gsm8k":
        return _extract_gsm_strict(text)
    if family == "humaneval":
        code = extract_code(text)
        return code if code.strip() else None
    raise ValueError(f"unknown family {family!r}; expected one of {FAMILIES + (FACTS_FAMILY,)}")


def _answer_of(target: Any) -> str:
    return str(target["answer"]) if isinstance(target, dict) else str(target)


def score(family: str, completion: str, target: Any) -> dict[str, float]:
    """Per-example metrics (floats) for one completion against ``target``.

    ifeval: prompt_level_strict_acc, inst_level_strict_acc, inst_passed,
    inst_total; bbh/mmlu_pro/gpqa: exact_match; gsm8k: exact_match (strict)
    and exact_match_flexible; humaneval: pass@1; facts: exact_match.
    Garbage or empty completions score 0; an unknown family raises ValueError.
    """
    if family not in FAMILIES and family != FACTS_FAMILY:
        raise ValueError(f"unknown family {family!r}; expected one of {FAMILIES + (FACTS_FAMILY,)}")
    text = _as_text(completion)
    if family == "ifeval":
        return _score_ifeval(text, target)
    if family == "humaneval":
        return _score_humaneval(text, target)
    if family == "gsm8k":
        gold = _norm_number(_answer_of(target))
        strict = _extract_gsm_strict(text)
        flex = _extract_gsm_flexible(text)
        return {"exact_match": float(strict is not None and strict == gold),
                "exact_match_flexible": float(flex is not None and flex == gold)}
    if family == FACTS_FAMILY:
        gold = target["response"] if isinstance(target, dict) else str(target)
        return {"exact_match": float(bool(text.strip()) and _norm_ws(text).lower() == _norm_ws(gold).lower())}
    pred = extract_answer(family, text)
    if pred is None:
        return {"exact_match": 0.0}
    gold = _answer_of(target)
    if family == "bbh":
        return {"exact_match": float(pred.lower() == _norm_ws(gold).lower())}
    return {"exact_match": float(pred == gold.strip().upper())}


if __name__ == "__main__":
    _train, _test = make_splits(200, 50, seed=0)
    print(f"train {len(_train)} examples, test {len(_test)} examples")
    for _fam in FAMILIES + (FACTS_FAMILY,):
        _exs = [x for x in _train if x["family"] == _fam]
        _words = [len(x["prompt"].split()) + len(x["response"].split()) for x in _exs]
        _chars = [len(w) for x in _exs for w in (x["prompt"] + " " + x["response"]).split()]
        print(f"\n=== {_fam}: {len(_exs)} train; prompt+response words mean {sum(_words) / len(_words):.1f} "
              f"(min {min(_words)}, max {max(_words)}); mean word length {sum(_chars) / len(_chars):.2f} chars")
        for _x in _exs[:2]:
            print("--- PROMPT:\n" + _x["prompt"] + "\n--- RESPONSE:\n" + _x["response"])
