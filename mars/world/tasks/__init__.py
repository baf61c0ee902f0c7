"""Synthetic instruction data shaped like the six MARS evaluation benchmarks (the tiny world's tasks).

The MARS replication trains a tiny (~1-3M parameter) Qwen2-architecture model from scratch on a 2-core CPU.  The
real benchmarks (IFEval, BBH, MMLU-Pro, GPQA, GSM8K, HumanEval) are far beyond such a model, so this package
generates small, closed-vocabulary stand-ins that keep each benchmark's *format* and *scoring rule* while being
learnable from a few thousand short examples.  Every prompt+response is short (roughly 15-90 whitespace-separated
words) and mixes predictable spans (templated phrases, code boilerplate, "So the answer is") with hard tokens
(numbers, letters, computed values).  docs/method.md maps each family onto its benchmark.

One module per family, each defining its ``FAMILY`` (:class:`Family`: generate, extract, score, metrics):

    ifeval     verifiable formatting instructions            prompt_level_strict_acc, inst_level_strict_acc
    bbh        five BBH-like subtasks, chain of thought        exact_match
    mmlu_pro   10-option questions over a fact base            exact_match
    gpqa       4-option two-hop questions over the fact base   exact_match
    gsm8k      arithmetic word problems, "#### N"              exact_match, exact_match_flexible
    humaneval  write a function, run against tests             pass@1 (through mars.evaluation.sandbox.run_tests)
    facts      the fact base taught as plain questions (train only, not a benchmark)

``registry`` maps names to families; ``splits`` builds the records (:func:`make_splits`, :func:`make_pretrain`,
:func:`few_shot_examples`).  This module is the public face: :func:`extract_answer` and :func:`score` dispatch to
the family.
"""

from __future__ import annotations

from typing import Any

from mars.world.tasks.bbh import BBH_EVAL_SHOTS, BBH_SUBTASKS
from mars.world.tasks.common import LETTERS, Family, _as_text
from mars.world.tasks.facts import ATTRIBUTES, FACTS_FAMILY, N_TEST_FACTS, N_TEST_SOURCES, entity_names, fact_base
from mars.world.tasks.humaneval import HUMANEVAL_TIMEOUT_S, extract_code
from mars.world.tasks.ifeval import check_instruction, count_bullets, count_sentences
from mars.world.tasks.registry import FAMILIES, REGISTRY, family
from mars.world.tasks.splits import few_shot_examples, make_heldout, make_pretrain, make_splits, make_train

__all__ = [
    "ATTRIBUTES",
    "BBH_EVAL_SHOTS",
    "BBH_SUBTASKS",
    "FACTS_FAMILY",
    "FAMILIES",
    "HUMANEVAL_TIMEOUT_S",
    "LETTERS",
    "N_TEST_FACTS",
    "N_TEST_SOURCES",
    "REGISTRY",
    "Family",
    "check_instruction",
    "count_bullets",
    "count_sentences",
    "entity_names",
    "extract_answer",
    "extract_code",
    "fact_base",
    "family",
    "few_shot_examples",
    "make_heldout",
    "make_pretrain",
    "make_splits",
    "make_train",
    "score",
]


def extract_answer(family_name: str, completion: str) -> str | None:
    """The string the family's main metric compares (None if nothing found).

    ifeval: the stripped response; bbh: text after the last "answer is" (final period dropped, whitespace
    collapsed); mmlu_pro/gpqa: the upper-case letter; gsm8k: the strict "#### N" number (normalised); humaneval:
    the extracted code; facts: the stripped response.
    """
    return family(family_name).extract(_as_text(completion))


def score(family_name: str, completion: str, target: Any) -> dict[str, float]:
    """Per-example metrics (floats) for one completion against ``target``.

    ifeval: prompt_level_strict_acc, inst_level_strict_acc, inst_passed, inst_total; bbh/mmlu_pro/gpqa:
    exact_match; gsm8k: exact_match (strict) and exact_match_flexible; humaneval: pass@1; facts: exact_match.
    Garbage or empty completions score 0; an unknown family raises ValueError.
    """
    return family(family_name).score(_as_text(completion), target)
