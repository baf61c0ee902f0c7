"""The humaneval family: "Write a Python function `add_three(x)` that returns x plus 3." -> a fenced python block.

``target`` holds HumanEval-style tests (``def check(candidate): assert ...`` then ``check(entry_point)``); scoring
extracts the code (first fenced block, else the whole text) and runs it with its tests through
:func:`mars.evaluation.sandbox.run_tests`; metric ``pass@1``.  Templates without constants (e.g. "max of a list") always
stay in train, so test problems are unseen constants of templates that train teaches.
"""

from __future__ import annotations

import functools
import random
import re
from typing import Any

from mars.world.tasks.common import NUMBER_WORDS, Family, _as_text, draw_generated

HUMANEVAL_TIMEOUT_S = 5.0

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
    dict(
        id="add",
        kind="int",
        consts=[(1, 20)],
        names=["add_{wa}", "plus_{wa}"],
        desc="returns {p} plus {a}",
        body="return {p} + {a}",
        ref=lambda x, a, b: x + a,
        inputs=lambda r, a, b: _ints(r),
    ),
    dict(
        id="sub",
        kind="int",
        consts=[(1, 20)],
        names=["subtract_{wa}", "minus_{wa}"],
        desc="returns {p} minus {a}",
        body="return {p} - {a}",
        ref=lambda x, a, b: x - a,
        inputs=lambda r, a, b: _ints(r),
    ),
    dict(
        id="times",
        kind="int",
        consts=[(2, 20)],
        names=["times_{wa}", "multiply_by_{wa}"],
        desc="returns {p} times {a}",
        body="return {p} * {a}",
        ref=lambda x, a, b: x * a,
        inputs=lambda r, a, b: _ints(r),
    ),
    dict(
        id="lin_plus",
        kind="int",
        consts=[(2, 9), (1, 20)],
        names=["scale_and_add", "linear", "affine"],
        desc="returns {p} times {a} plus {b}",
        body="return {p} * {a} + {b}",
        ref=lambda x, a, b: x * a + b,
        inputs=lambda r, a, b: _ints(r),
    ),
    dict(
        id="lin_minus",
        kind="int",
        consts=[(2, 9), (1, 20)],
        names=["scale_and_subtract", "transform"],
        desc="returns {p} times {a} minus {b}",
        body="return {p} * {a} - {b}",
        ref=lambda x, a, b: x * a - b,
        inputs=lambda r, a, b: _ints(r),
    ),
    dict(
        id="divisible",
        kind="int",
        consts=[(2, 20)],
        names=["is_divisible_by_{wa}", "divides_by_{wa}"],
        desc="returns True if {p} is divisible by {a}, else False",
        body="return {p} % {a} == 0",
        ref=lambda x, a, b: x % a == 0,
        inputs=lambda r, a, b: [a * r.randint(1, 5), a * r.randint(1, 5) + 1, r.randint(0, 40)],
    ),
    dict(
        id="count_value",
        kind="list",
        consts=[(0, 20)],
        names=["count_{wa}", "how_many_{wa}"],
        desc="returns how many times {a} appears in the list {p}",
        body="return {p}.count({a})",
        ref=lambda xs, a, b: xs.count(a),
        inputs=lambda r, a, b: _lists(r, must=a),
    ),
    dict(
        id="count_greater",
        kind="list",
        consts=[(1, 20)],
        names=["count_above_{wa}", "count_greater_than_{wa}"],
        desc="returns how many numbers in the list {p} are greater than {a}",
        body="count = 0\n    for x in {p}:\n        if x > {a}:\n            count += 1\n    return count",
        ref=lambda xs, a, b: sum(1 for x in xs if x > a),
        inputs=lambda r, a, b: _lists(r, hi=25),
    ),
    dict(
        id="count_less",
        kind="list",
        consts=[(1, 20)],
        names=["count_below_{wa}", "count_less_than_{wa}"],
        desc="returns how many numbers in the list {p} are less than {a}",
        body="count = 0\n    for x in {p}:\n        if x < {a}:\n            count += 1\n    return count",
        ref=lambda xs, a, b: sum(1 for x in xs if x < a),
        inputs=lambda r, a, b: _lists(r, hi=25),
    ),
    dict(
        id="filter_greater",
        kind="list",
        consts=[(1, 20)],
        names=["keep_above_{wa}", "filter_greater_than_{wa}"],
        desc="returns a list of the numbers in {p} that are greater than {a}",
        body="return [x for x in {p} if x > {a}]",
        ref=lambda xs, a, b: [x for x in xs if x > a],
        inputs=lambda r, a, b: _lists(r, hi=25),
    ),
    dict(
        id="filter_less",
        kind="list",
        consts=[(1, 20)],
        names=["keep_below_{wa}", "filter_less_than_{wa}"],
        desc="returns a list of the numbers in {p} that are less than {a}",
        body="return [x for x in {p} if x < {a}]",
        ref=lambda xs, a, b: [x for x in xs if x < a],
        inputs=lambda r, a, b: _lists(r, hi=25),
    ),
    dict(
        id="add_each",
        kind="list",
        consts=[(1, 20)],
        names=["add_{wa}_to_each", "shift_by_{wa}"],
        desc="returns a new list with {a} added to each number in {p}",
        body="return [x + {a} for x in {p}]",
        ref=lambda xs, a, b: [x + a for x in xs],
        inputs=lambda r, a, b: _lists(r),
    ),
    dict(
        id="times_each",
        kind="list",
        consts=[(2, 20)],
        names=["multiply_each_by_{wa}", "scale_by_{wa}"],
        desc="returns a new list with each number in {p} multiplied by {a}",
        body="return [x * {a} for x in {p}]",
        ref=lambda xs, a, b: [x * a for x in xs],
        inputs=lambda r, a, b: _lists(r),
    ),
    dict(
        id="repeat",
        kind="str",
        consts=[(2, 5)],
        names=["repeat_{wa}_times", "copy_{wa}_times"],
        desc="returns the string {p} repeated {a} times",
        body="return {p} * {a}",
        ref=lambda s, a, b: s * a,
        inputs=lambda r, a, b: _strs(r),
    ),
    dict(
        id="max",
        kind="list",
        consts=[],
        names=["find_max", "get_max", "largest"],
        desc="returns the largest number in the list {p}",
        body="return max({p})",
        ref=lambda xs, a, b: max(xs),
        inputs=lambda r, a, b: _lists(r),
    ),
    dict(
        id="min",
        kind="list",
        consts=[],
        names=["find_min", "get_min", "smallest"],
        desc="returns the smallest number in the list {p}",
        body="return min({p})",
        ref=lambda xs, a, b: min(xs),
        inputs=lambda r, a, b: _lists(r),
    ),
    dict(
        id="sum",
        kind="list",
        consts=[],
        names=["sum_list", "total"],
        desc="returns the sum of the numbers in the list {p}",
        body="return sum({p})",
        ref=lambda xs, a, b: sum(xs),
        inputs=lambda r, a, b: _lists(r),
    ),
    dict(
        id="product",
        kind="list",
        consts=[],
        names=["product", "multiply_all"],
        desc="returns the product of the numbers in the list {p}",
        body="result = 1\n    for x in {p}:\n        result *= x\n    return result",
        ref=lambda xs, a, b: _prod(xs),
        inputs=lambda r, a, b: _lists(r, hi=6),
    ),
    dict(
        id="count_even",
        kind="list",
        consts=[],
        names=["count_even", "num_even"],
        desc="returns how many even numbers are in the list {p}",
        body="count = 0\n    for x in {p}:\n        if x % 2 == 0:\n            count += 1\n    return count",
        ref=lambda xs, a, b: sum(1 for x in xs if x % 2 == 0),
        inputs=lambda r, a, b: _lists(r),
    ),
    dict(
        id="last",
        kind="list",
        consts=[],
        names=["last_item", "get_last"],
        desc="returns the last element of the list {p}",
        body="return {p}[-1]",
        ref=lambda xs, a, b: xs[-1],
        inputs=lambda r, a, b: _lists(r),
    ),
    dict(
        id="first",
        kind="list",
        consts=[],
        names=["first_item", "get_first"],
        desc="returns the first element of the list {p}",
        body="return {p}[0]",
        ref=lambda xs, a, b: xs[0],
        inputs=lambda r, a, b: _lists(r),
    ),
    dict(
        id="reverse",
        kind="str",
        consts=[],
        names=["reverse_string", "flip"],
        desc="returns the string {p} reversed",
        body="return {p}[::-1]",
        ref=lambda s, a, b: s[::-1],
        inputs=lambda r, a, b: _strs(r),
    ),
    dict(
        id="upper",
        kind="str",
        consts=[],
        names=["to_upper", "shout"],
        desc="returns the string {p} in capital letters",
        body="return {p}.upper()",
        ref=lambda s, a, b: s.upper(),
        inputs=lambda r, a, b: _strs(r),
    ),
    dict(
        id="length",
        kind="str",
        consts=[],
        names=["length", "count_chars"],
        desc="returns the number of characters in the string {p}",
        body="return len({p})",
        ref=lambda s, a, b: len(s),
        inputs=lambda r, a, b: _strs(r),
    ),
    dict(
        id="is_even",
        kind="int",
        consts=[],
        names=["is_even", "check_even"],
        desc="returns True if {p} is even, else False",
        body="return {p} % 2 == 0",
        ref=lambda x, a, b: x % 2 == 0,
        inputs=lambda r, a, b: [2 * r.randint(0, 9), 2 * r.randint(0, 9) + 1, r.randint(0, 20)],
    ),
    dict(
        id="is_odd",
        kind="int",
        consts=[],
        names=["is_odd", "check_odd"],
        desc="returns True if {p} is odd, else False",
        body="return {p} % 2 == 1",
        ref=lambda x, a, b: x % 2 == 1,
        inputs=lambda r, a, b: [2 * r.randint(0, 9), 2 * r.randint(0, 9) + 1, r.randint(0, 20)],
    ),
    dict(
        id="square",
        kind="int",
        consts=[],
        names=["square", "squared"],
        desc="returns {p} squared",
        body="return {p} * {p}",
        ref=lambda x, a, b: x * x,
        inputs=lambda r, a, b: _ints(r, hi=12),
    ),
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
    return key, {"prompt": prompt, "response": response, "target": {"entry_point": name, "test": test}}


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
    from mars.evaluation.sandbox import run_tests  # lazy: a missing sandbox is an error, not a 0 score

    return {"pass@1": float(run_tests(code, test, timeout_s=HUMANEVAL_TIMEOUT_S))}


def _extract_humaneval(text: str) -> str | None:
    code = extract_code(text)
    return code if code.strip() else None


FAMILY = Family(
    name="humaneval",
    generate=functools.partial(draw_generated, "humaneval", _gen_humaneval),
    extract=_extract_humaneval,
    score=_score_humaneval,
    metrics=(("pass@1", "mean"),),
)
