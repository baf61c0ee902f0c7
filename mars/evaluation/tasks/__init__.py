"""lm-eval task definitions: the six tiny-world benchmarks (profile ``tiny``) and the paper's real tasks (``paper``).

Profile ``tiny``
----------------
``write_task_dir(data_dir, out)`` writes lm-eval YAMLs into ``out`` (a temporary include dir made at run time), with
the ABSOLUTE data folder baked in, so the tasks work from any current directory:

    tiny_ifeval  tiny_mmlu_pro  tiny_gpqa  tiny_gsm8k  tiny_humaneval      one task per family
    tiny_bbh                                                              group of tiny_bbh_<subtask> tasks
    tiny                                                                  group of the six

Data: ``<data_dir>/test.jsonl`` (the records of the family, file order; ``--limit N`` takes the first N of each
task, i.e. of each bbh subtask), loaded in memory by :func:`mars.evaluation.tasks.hooks.load_split` (``custom_dataset``;
no datasets cache is written).  Prompt: the user message is the record's ``prompt`` (the harness applies the chat
template: ``apply_chat_template=True``).  Few-shot: bbh CoT, the shots being the first TRAIN records of the same
subtask (3-shot in the paper's tasks, :data:`PAPER_FEWSHOT`; 1-shot in the tiny ones, :data:`FEWSHOT`, so that the
prompts fit the tiny 256-token SFT length; ``fewshot_split: train``, sampler ``first_n``; with
``fewshot_as_multiturn=True`` each shot is a user/assistant turn whose answer is the record's ``response``, the
full chain of thought); everything else 0-shot.  Stop strings: ``<|im_end|>`` (the harness adds the model's EOS
text as well); greedy; ``max_gen_toks`` 256 (the CLI overrides it through ``gen_kwargs``).

Metrics (each family's ``metrics`` in the registry of :mod:`mars.world.tasks`, per-document values from
:func:`hooks.process_results`), mirroring the real benchmarks:

    tiny_ifeval     prompt_level_strict_acc (mean), inst_level_strict_acc (mean over ALL instructions: the
                    per-document value is the list of per-instruction pass flags, as in IFEval)
    tiny_bbh        exact_match (group: mean over subtasks weighted by size, as bbh_cot_fewshot)
    tiny_mmlu_pro   exact_match            tiny_gpqa   exact_match
    tiny_gsm8k      exact_match (strict "####"), exact_match_flexible (last number)
    tiny_humaneval  pass@1 (the program runs only through mars.evaluation.sandbox.run_python)

Profile ``paper``
-----------------
:data:`PAPER_TASKS` maps the families to the installed harness's task names; they read their data sets from the hub,
or, with ``harness_data`` (config ``eval.harness_data``, ``--harness-data``), from a local mirror of them
(:mod:`mars.evaluation.tasks.mirror`: the harness's own task definitions, only the data source redirected).  The paper
says "gsm8k_cot (0-shot)": the harness's ``gsm8k_cot`` is its 8-shot CoT prompt, ``gsm8k_cot_zeroshot`` the 0-shot
variant, which is what is used here.  ``mmlu_pro`` is 5-shot in the harness and run with ``num_fewshot=0`` as in
the paper.  ``humaneval_instruct`` is run with its metric replaced by :func:`hooks.sandboxed_pass_at_1` (the
harness's own ``code_eval`` metric executes model code unsandboxed).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from mars.pipeline.config import ConfigError
from mars.world.tasks import BBH_SUBTASKS, FAMILIES, REGISTRY

TINY_PREFIX = "tiny_"
TINY_GROUP = "tiny"
TINY_TASKS: dict[str, str] = {f"{TINY_PREFIX}{f}": f for f in FAMILIES}  # task name -> family
STOP = "<|im_end|>"
DEFAULT_MAX_GEN_TOKS = 256
TASK_VERSION = 1.0

PAPER_GROUP = "paper"
PAPER_TASKS: dict[str, str] = {
    "ifeval": "ifeval",
    "bbh": "bbh_cot_fewshot",
    "mmlu_pro": "mmlu_pro",
    "gpqa": "gpqa_main_cot_zeroshot",
    "gsm8k": "gsm8k_cot_zeroshot",
    "humaneval": "humaneval_instruct",
}
# Where the installed harness keeps each paper task's YAMLs (folders under lm_eval/tasks). Indexing only these is
# the same task definitions at a fraction of the cost of indexing all of the harness's (about 8 s per job, twice
# with a mirror); tests/test_evaluate.py checks that both indexes resolve every paper task and subtask alike.
PAPER_TASK_DIRS: dict[str, str] = {
    "ifeval": "ifeval",
    "bbh": "bbh/cot_fewshot",
    "mmlu_pro": "mmlu_pro",
    "gpqa": "gpqa/cot_zeroshot",
    "gsm8k": "gsm8k",
    "humaneval": "humaneval",
}


def paper_task_manager(include_path: str | Path | None = None):
    """A ``TaskManager`` over the paper tasks' own folders of the installed harness (plus ``include_path``)."""
    import lm_eval.tasks
    from lm_eval.tasks import TaskManager

    root = Path(lm_eval.tasks.__file__).parent
    paths = [str(root / folder) for folder in PAPER_TASK_DIRS.values()]
    return TaskManager(include_path=[*paths, *([str(include_path)] if include_path else [])], include_defaults=False)


PAPER_FEWSHOT: dict[str, int] = {"ifeval": 0, "bbh": 3, "mmlu_pro": 0, "gpqa": 0, "gsm8k": 0, "humaneval": 0}
FEWSHOT: dict[str, int] = {"bbh": 1}  # tiny: 1-shot, so prompts fit the 256-token SFT length

# the headline metric of each family (key in the result's "metrics")
PRIMARY_METRIC: dict[str, str] = {family: REGISTRY[family].primary_metric for family in FAMILIES}
PAPER_PRIMARY_METRIC: dict[str, str] = {
    "ifeval": "prompt_level_strict_acc",
    "bbh": "exact_match,get-answer",
    "mmlu_pro": "exact_match,custom-extract",
    "gpqa": "exact_match,flexible-extract",
    "gsm8k": "exact_match,flexible-extract",
    "humaneval": "pass@1,create_test",
}

_HOOKS = "mars.evaluation.tasks.hooks"


def family_of(task: str) -> str | None:
    """The family of a tiny task / bbh subtask / paper task name (None if unknown)."""
    if task in TINY_TASKS:
        return TINY_TASKS[task]
    if task.startswith(f"{TINY_PREFIX}bbh_"):
        return "bbh"
    for fam, name in PAPER_TASKS.items():
        if task == name or task.startswith(name + "_"):
            return fam
    return None


def resolve_tasks(names: list[str], profile: str) -> list[tuple[str, str]]:
    """CLI task names -> [(harness task name, family)], in order, without duplicates.

    Accepted: the profile's task names, the family names (``gsm8k``), and the group (``tiny`` / ``paper``)."""
    if profile not in ("tiny", "paper"):
        raise ConfigError(f"--profile must be 'tiny' or 'paper', got {profile!r}")
    table = TINY_TASKS if profile == "tiny" else {v: k for k, v in PAPER_TASKS.items()}
    group = TINY_GROUP if profile == "tiny" else PAPER_GROUP
    out: list[tuple[str, str]] = []
    for raw in names:
        name = raw.strip()
        if not name:
            continue
        if name == group:
            picked = list(table.items())
        elif name in table:
            picked = [(name, table[name])]
        elif name in FAMILIES:
            task = f"{TINY_PREFIX}{name}" if profile == "tiny" else PAPER_TASKS[name]
            picked = [(task, name)]
        else:
            known = ", ".join([group, *table])
            raise ConfigError(f"unknown task {name!r} for profile {profile!r}; known: {known}")
        for item in picked:
            if item not in out:
                out.append(item)
    if not out:
        raise ConfigError("--tasks is empty")
    return out


# ----------------------------------------------------------------------------------------------------------------
# YAML generation (profile tiny)


class _Function(str):
    """A ``!function`` reference in a generated YAML."""


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(_Function, lambda dumper, value: dumper.represent_scalar("!function", str(value)))


def _fn(name: str) -> _Function:
    return _Function(f"{_HOOKS}.{name}")


def _aggregation(aggregation: Any) -> str | _Function:
    """lm-eval's name of a built-in aggregation ("mean"), or a ``!function`` reference to the family's own."""
    if isinstance(aggregation, str):
        return aggregation
    return _Function(f"{aggregation.__module__}.{aggregation.__qualname__}")


def task_config(
    family: str,
    data_dir: str | Path,
    *,
    name: str | None = None,
    subtask: str | None = None,
    max_gen_toks: int = DEFAULT_MAX_GEN_TOKS,
) -> dict[str, Any]:
    """The lm-eval config dict of one tiny task (``!function`` values are :class:`_Function` strings)."""
    metric_list = []
    for metric, aggregation in REGISTRY[family].metrics:
        metric_list.append({"metric": metric, "aggregation": _aggregation(aggregation), "higher_is_better": True})
    cfg: dict[str, Any] = {
        "task": name or f"{TINY_PREFIX}{family}",
        "custom_dataset": _fn("load_split"),
        "dataset_kwargs": {"data_dir": str(Path(data_dir).resolve()), "family": family, "subtask": subtask},
        "output_type": "generate_until",
        "test_split": "test",
        "doc_to_text": "prompt",
        "doc_to_target": "response",
        "process_results": _fn("process_results"),
        "metric_list": metric_list,
        "generation_kwargs": {"until": [STOP], "do_sample": False, "temperature": 0.0, "max_gen_toks": max_gen_toks},
        "num_fewshot": FEWSHOT.get(family, 0),
        "metadata": {"version": TASK_VERSION},  # (lm-eval passes metadata to custom_dataset as keyword arguments)
    }
    if family == "bbh":
        cfg.update(
            {
                "training_split": "train",
                "fewshot_split": "train",
                "target_delimiter": "",
                "fewshot_config": {"sampler": "first_n"},
            }
        )
    if family == "humaneval":
        cfg["unsafe_code"] = True  # model code is executed (through mars.evaluation.sandbox only)
    return cfg


def _count(path: Path, family: str, subtask: str | None = None) -> int:
    from mars.evaluation.tasks.hooks import read_records

    return len(read_records(path, family, subtask)) if path.is_file() else 0


def check_data_dir(data_dir: str | Path | None) -> Path:
    if data_dir is None or str(data_dir) == "":
        raise ConfigError("--data is required for profile 'tiny' (the world's data folder with test.jsonl)")
    path = Path(data_dir).expanduser().resolve()
    if (path / "data" / "test.jsonl").is_file() and not (path / "test.jsonl").is_file():
        path = path / "data"  # the world folder itself
    if not path.is_dir():
        raise ConfigError(f"data folder not found: {data_dir}")
    if not (path / "test.jsonl").is_file():
        raise ConfigError(f"no test.jsonl in the data folder {data_dir}")
    return path


def write_task_dir(
    data_dir: str | Path,
    out: str | Path,
    *,
    max_gen_toks: int = DEFAULT_MAX_GEN_TOKS,
    families: tuple[str, ...] = FAMILIES,
) -> dict[str, list[str]]:
    """Write the tiny task YAMLs for ``data_dir`` into ``out``; returns {task or group name: its leaf tasks}.

    A family without test records gets no task; bbh gets one task per subtask present in the test split (the
    group ``tiny_bbh`` collects them); the shots of a subtask must exist in ``train.jsonl``."""
    data = check_data_dir(data_dir)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, list[str]] = {}

    def dump(filename: str, cfg: dict) -> None:
        (out / filename).write_text(yaml.dump(cfg, Dumper=_Dumper, sort_keys=False, allow_unicode=True))

    for family in families:
        if family == "bbh":
            leaves = []
            for sub in BBH_SUBTASKS:
                if _count(data / "test.jsonl", "bbh", sub) == 0:
                    continue
                shots = _count(data / "train.jsonl", "bbh", sub)
                if shots < FEWSHOT["bbh"]:
                    raise ConfigError(
                        f"tiny_bbh needs {FEWSHOT['bbh']} train records of subtask {sub!r} for its "
                        f"shots, {data / 'train.jsonl'} has {shots}"
                    )
                name = f"{TINY_PREFIX}bbh_{sub}"
                dump(f"{name}.yaml", task_config("bbh", data, name=name, subtask=sub, max_gen_toks=max_gen_toks))
                leaves.append(name)
            if leaves:
                dump(
                    f"_{TINY_PREFIX}bbh.yaml",
                    {
                        "group": f"{TINY_PREFIX}bbh",
                        "task": leaves,
                        "aggregate_metric_list": [
                            {"metric": "exact_match", "aggregation": "mean", "weight_by_size": True}
                        ],
                        "metadata": {"version": TASK_VERSION},
                    },
                )
                written[f"{TINY_PREFIX}bbh"] = leaves
        elif _count(data / "test.jsonl", family) > 0:
            name = f"{TINY_PREFIX}{family}"
            dump(f"{name}.yaml", task_config(family, data, max_gen_toks=max_gen_toks))
            written[name] = [name]
    if written:
        dump(f"_{TINY_GROUP}.yaml", {"group": TINY_GROUP, "task": list(written), "metadata": {"version": TASK_VERSION}})
        written[TINY_GROUP] = [leaf for name in list(written) for leaf in written[name]]
    (out / "tasks.json").write_text(json.dumps({"data_dir": str(data), "tasks": written}, indent=2))
    return written


# ----------------------------------------------------------------------------------------------------------------
# profile paper


def paper_task_spec(family: str, task_manager, data_overrides: dict[str, dict] | None = None) -> str | dict:
    """What to hand ``simple_evaluate(tasks=[...])`` for a paper-profile family.

    The registered name, except humaneval_instruct: its config (read from the harness's YAML, functions
    unresolved) with the metric replaced by the sandboxed pass@1 and the post-processing filter by our own copy
    (the harness's ``utils.py`` would load the unsandboxed ``code_eval`` metric at import), plus its
    ``data_overrides`` entry when the data come from a local mirror (:mod:`mars.evaluation.tasks.mirror`; the other
    tasks' mirror YAMLs are in the task manager's include path)."""
    name = PAPER_TASKS[family]
    if family != "humaneval":
        return name
    from lm_eval.tasks._yaml_loader import load_yaml

    from mars.evaluation.tasks import hooks

    entry = task_manager.task_index.get(name)
    if entry is None or entry.yaml_path is None:
        raise ConfigError(f"the installed lm-eval has no task {name!r}")
    cfg = load_yaml(entry.yaml_path, resolve_func=False, recursive=True)
    cfg["task"] = name
    cfg["metric_list"] = [{"metric": hooks.sandboxed_pass_at_1, "aggregation": "mean", "higher_is_better": True}]
    cfg["filter_list"] = [
        {"name": "create_test", "filter": [{"function": "custom", "filter_fn": hooks.humaneval_instruct_predictions}]}
    ]
    cfg.update((data_overrides or {}).get(name, {}))
    return cfg


def nltk_data_ready(harness_data: str | Path | None = None) -> bool:
    """Whether nltk's ``punkt_tab`` (IFEval's sentence splitter) is found, ``<harness_data>/nltk_data`` included
    (:func:`mars.evaluation.tasks.mirror.nltk_data_ready`; a cluster's prefetch fills that folder)."""
    from mars.evaluation.tasks.mirror import nltk_data_ready as ready

    return ready(harness_data)
