"""The registry of task families: name -> :class:`~mars.world.tasks.common.Family`.

The six benchmark families, in the order every split lists them, and the fact-teaching family (train only, not a
benchmark).  Generation, answer extraction, scoring and the lm-eval tasks (mars.evaluation.tasks) all look a family up
here, so a new family is one module and one line below.
"""

from __future__ import annotations

from mars.world.tasks import bbh, facts, gpqa, gsm8k, humaneval, ifeval, mmlu_pro
from mars.world.tasks.common import Family

FAMILIES: tuple[str, ...] = ("ifeval", "bbh", "mmlu_pro", "gpqa", "gsm8k", "humaneval")

REGISTRY: dict[str, Family] = {
    module.FAMILY.name: module.FAMILY for module in (ifeval, bbh, mmlu_pro, gpqa, gsm8k, humaneval, facts)
}
assert tuple(REGISTRY)[: len(FAMILIES)] == FAMILIES


def family(name: str) -> Family:
    """The family called ``name`` (ValueError for an unknown one)."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown family {name!r}; expected one of {tuple(REGISTRY)}") from None
