"""Sizes and helpers shared by the task-family tests."""

N_TRAIN, N_TEST = 60, 40


def by_family(examples: list[dict], family: str) -> list[dict]:
    return [x for x in examples if x["family"] == family]
