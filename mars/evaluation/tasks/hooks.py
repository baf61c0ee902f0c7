"""Python hooks of the tiny lm-eval tasks (referenced from the generated YAMLs as ``!function``).

Every function here is importable as ``mars.evaluation.tasks.hooks.<name>``, so the generated task folder needs no
``utils.py`` of its own and the YAMLs work from any current directory.

    load_split(data_dir, family, subtask)    ``custom_dataset``: DatasetDict {"train", "test"} of one family
    process_results(doc, results)            per-document metrics of the doc's family (mars.world.tasks registry)
    sandboxed_pass_at_1(references, predictions, k)
                                             pass@1 metric for the paper profile's ``humaneval_instruct``: the
                                             harness's own metric runs model code unsandboxed; this one goes
                                             through ``mars.evaluation.sandbox.run_python``
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mars.world.tasks import FAMILIES

_FIELDS = ("family", "id", "prompt", "response", "target")


def read_records(path: str | Path, family: str, subtask: str | None = None) -> list[dict]:
    """Records of one family (and bbh subtask) of a world JSONL split, in file order, all fields strings."""
    out = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            record = json.loads(line)
            if record.get("family") != family:
                continue
            if subtask is not None and decode_target(record).get("subtask") != subtask:
                continue
            row = {k: record.get(k, "") for k in _FIELDS}
            if not isinstance(row["target"], str):  # tolerate a split written with raw (non-JSON-string) targets
                row["target"] = json.dumps(row["target"], sort_keys=True)
            out.append(row)
    return out


def decode_target(doc: dict) -> Any:
    target = doc.get("target")
    if isinstance(target, str):
        try:
            return json.loads(target)
        except json.JSONDecodeError:
            return target
    return target


def load_split(data_dir: str = "", family: str = "", subtask: str | None = None, **_: Any):
    """``custom_dataset`` of every tiny task: the family's records of ``<data_dir>/{train,test}.jsonl``.

    Extra keyword arguments (the task's metadata, which lm-eval passes along) are ignored."""
    import datasets

    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; expected one of {FAMILIES}")
    splits = {}
    for split in ("train", "test"):
        path = Path(data_dir) / f"{split}.jsonl"
        if not path.is_file():
            continue
        rows = read_records(path, family, subtask)
        features = datasets.Features({k: datasets.Value("string") for k in _FIELDS})
        columns = {k: [row[k] for row in rows] for k in _FIELDS}  # (from_list cannot build an empty split)
        splits[split] = datasets.Dataset.from_dict(columns, features=features)
    return datasets.DatasetDict(splits)


def _completion(results: list) -> str:
    value = results[0] if results else ""
    if isinstance(value, (list, tuple)):  # repeats > 1 without a take_first filter
        value = value[0] if value else ""
    return value if isinstance(value, str) else ""


def process_results(doc: dict, results: list) -> dict:
    """Per-document metrics of every tiny task: the doc's family (from the registry of mars.world.tasks) scores the
    completion against the doc's target; the values are what that family's lm-eval metrics aggregate."""
    from mars.world.tasks import family

    return family(doc["family"]).lm_eval_results(_completion(results), decode_target(doc))


# ----------------------------------------------------------------------------------------------------------------
# paper profile: humaneval_instruct scored through the sandbox


def humaneval_instruct_predictions(resps: list[list[str]], docs: list[dict]) -> list[list[str]]:
    """The harness's humaneval_instruct post-processing: the doc's prompt + the answer up to the closing fence."""
    out = []
    for resp, doc in zip(resps, docs):
        out.append([doc["prompt"] + (r if r.find("```") == -1 else r[: r.find("```")]) for r in resp])
    return out


def sandboxed_pass_at_1(references: list[str], predictions: list[list[str]], k: Any = None) -> dict[str, float]:
    """pass@1 of the first prediction of each reference (``test`` + ``check(entry_point)``), run in the sandbox
    through :func:`mars.evaluation.sandbox.run_tests`, as the tiny humaneval scorer does."""
    from mars.evaluation.sandbox import run_tests
    from mars.world.tasks import HUMANEVAL_TIMEOUT_S

    passed = [
        float(run_tests(preds[0] if preds else "", ref, timeout_s=HUMANEVAL_TIMEOUT_S))
        for ref, preds in zip(references, predictions)
    ]
    return {"pass@1": sum(passed) / len(passed) if passed else 0.0}
