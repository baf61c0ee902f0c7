"""The tiny world's records: the SFT/test splits, the pre-training corpus and few-shot examples, over the registry.

Splits: for the generated families (ifeval, bbh, gsm8k, humaneval) every problem has an *underlying key* (e.g. the
numbers of a word problem without the names, the function and constants without the identifier names); a
seed-dependent hash sends 1/4 of the key space to test.  Train examples are drawn only from train keys (unique
prompts), test examples only from test keys (unique keys), so train and test never share an underlying problem,
and :func:`few_shot_examples` (which draws from the train side) never leaks test problems.  mmlu_pro and gpqa
reserve held-out facts / source entities for test instead (mars.world.tasks.facts).  Generation is a
deterministic stream per (seed, family, split): asking for more examples extends the list (smaller sizes are
prefixes).  Everything is deterministic in ``seed`` (``random.Random`` seeded with strings, no set iteration),
standard library only.
"""

from __future__ import annotations

from typing import Any

from mars.world.tasks.bbh import BBH_SUBTASKS, with_shot_context
from mars.world.tasks.common import _check_size, _rng
from mars.world.tasks.facts import ATTRIBUTES, FACTS_FAMILY, N_TEST_FACTS, N_TEST_SOURCES, fact_base, fact_examples
from mars.world.tasks.registry import FAMILIES, REGISTRY


def _finish(family: str, split: str, exs: list[dict], tag: str | None = None) -> list[dict]:
    out = []
    for i, ex in enumerate(exs):
        ident = f"{family}/{tag or split}/{i:05d}"
        out.append(
            {"family": family, "id": ident, "prompt": ex["prompt"], "response": ex["response"], "target": ex["target"]}
        )
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
            raise ValueError(
                f"{fam}: requested {n_test} test questions per family but the fact base "
                f"only holds {cap} held-out questions (n_test_per_family <= {cap})"
            )
    test: list[dict] = []
    for fam in FAMILIES:
        test += _finish(fam, "test", REGISTRY[fam].generate("test", n_test, seed, "test"))
    return make_train(n_train, seed), test


def make_train(n_per_family: int, seed: int = 0) -> list[dict]:
    """The SFT set: ``n_per_family`` problems of every family, then the 1000 fact-teaching records. A larger set
    (the scaling study's 4x, 8x) holds a smaller one as its per-family prefix."""
    n = _check_size("n_per_family", n_per_family)
    train: list[dict] = []
    for fam in FAMILIES:
        fam_train = _finish(fam, "train", REGISTRY[fam].generate("train", n, seed, "train"))
        train += with_shot_context(fam_train) if fam == "bbh" else fam_train
    return train + _finish(FACTS_FAMILY, "train", fact_examples(fact_base(seed)))


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
        records = _finish(fam, "pretrain", REGISTRY[fam].generate("train", n, seed, "pretrain"))
        out += with_shot_context(records) if fam == "bbh" else records
    return out + _finish(FACTS_FAMILY, "pretrain", fact_examples(fact_base(seed)))


def make_heldout(n_per_family: int, seed: int = 0, exclude: set[str] = frozenset()) -> list[dict]:
    """``n_per_family`` problems of every family for the held-out next-token loss (no facts records).

    Drawn from the TRAIN side of each family's key space (never a test problem) on a stream of its own
    ("heldout"), skipping every prompt in ``exclude`` (the SFT sets and the pre-training corpus), so that no
    held-out record is in any training set. Raises ValueError when a family runs out of unused prompts.
    """
    n = _check_size("n_per_family", n_per_family)
    out: list[dict] = []
    for fam in FAMILIES:
        want = n
        for attempt in range(6):  # ask for more until n unused prompts are found (smaller sizes are prefixes)
            drawn = REGISTRY[fam].generate("train", want, seed, "heldout")
            kept = [ex for ex in drawn if ex["prompt"] not in exclude][:n]
            if len(kept) == n:
                break
            want *= 2
        else:
            raise ValueError(f"{fam}: only {len(kept)} held-out problems outside the training sets (requested {n})")
        records = _finish(fam, "heldout", kept)
        out += with_shot_context(records) if fam == "bbh" else records
    return out


def few_shot_examples(family: str, k: int, seed: int = 0, subtask: str | None = None) -> list[dict]:
    """``k`` examples from the TRAIN side of ``family`` (never a test problem).

    Drawn from their own deterministic stream (so they usually differ from the
    first training examples).  ``subtask`` restricts bbh shots to one subtask,
    as BBH's per-subtask 3-shot prompts do.
    """
    k = _check_size("k", k)
    if family == FACTS_FAMILY:
        exs = fact_examples(fact_base(seed))
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
    return _finish(family, "train", REGISTRY[family].generate("train", k, seed, stream, **kw), tag="fewshot")
