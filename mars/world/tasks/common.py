"""What every task family shares: seeded randomness, the train/test key split, the draw loop and :class:`Family`."""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Any, Callable

TEST_FRACTION_DENOM = 4  # 1/4 of the underlying key space is reserved for test
STALL_LIMIT = 4000  # consecutive draws without a new example before giving up

Metric = tuple[str, "str | Callable[[list], float]"]  # (name, lm-eval aggregation: "mean" or a function)


@dataclass(frozen=True)
class Family:
    """One synthetic task family: how its examples are drawn, how an answer is read and scored, what is reported.

    ``generate(split, n, seed, stream, **kw)`` returns ``n`` examples ``{"prompt", "response", "target", "key"}``
    of ``split`` ("train" or "test") from the deterministic stream ``(seed, name, stream)``; None for a family that
    is a fixed set (facts).  ``extract(text)`` is the string the main metric compares (None: nothing found);
    ``score(text, target)`` the per-example metrics (floats).  ``metrics`` are the metrics the lm-eval task reports,
    the first being the headline one; ``lm_eval_results`` the per-document values lm-eval aggregates, when they
    are not simply those metrics of ``score`` (IFEval's list of instruction flags).
    """

    name: str
    generate: Callable[..., list[dict]] | None
    extract: Callable[[str], str | None]
    score: Callable[[str, Any], dict[str, float]]
    metrics: tuple[Metric, ...]
    per_document: Callable[[str, Any], dict] | None = None

    @property
    def primary_metric(self) -> str:
        return self.metrics[0][0]

    def lm_eval_results(self, completion: str, target: Any) -> dict:
        if self.per_document is not None:
            return self.per_document(completion, target)
        scores = self.score(completion, target)
        return {name: scores[name] for name, _aggregation in self.metrics}


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
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
    "twenty",
]


def _norm_ws(s: str) -> str:
    return " ".join(s.split())


def _answer_of(target: Any) -> str:
    return str(target["answer"]) if isinstance(target, dict) else str(target)


def _check_size(name: str, n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, int):
        raise ValueError(f"{name} must be an int, got {n!r}")
    if n < 0:
        raise ValueError(f"{name} must be >= 0, got {n}")
    return n


def draw_generated(
    family: str, gen: Callable[..., tuple[str, dict]], split: str, n: int, seed: int, stream: str, **gen_kw: Any
) -> list[dict]:
    """``n`` unique examples of ``split`` from the generator ``gen`` (train: unique prompts; test: unique keys).

    Each draw yields an underlying key; a key of the other split is skipped (and does not count as a stall)."""
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
            if stall > STALL_LIMIT:
                raise ValueError(
                    f"{family}: could only generate {len(out)} unique {split} problems "
                    f"(requested {n}); the {family} {split} space is exhausted, request fewer"
                )
            continue
        stall = 0
        seen.add(ident)
        ex["key"] = key
        out.append(ex)
    return out
