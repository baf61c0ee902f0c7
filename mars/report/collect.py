"""Read the pipeline's outputs into flat tables.

Evaluation results live at ``<results>/<name>/<kind>/<model>/<setting>/<family>.json`` (one ``mars eval`` result
per file; kind ``eval`` or ``sweep``; ``setting`` = ``<method>-tau<tau>-<metric>``, see
:func:`mars.pipeline.experiments.setting_name`). Trained models live at ``<results>/<name>/models/<model>/`` with
``metrics.json`` (optimizer steps, wall time) and ``run_config.json`` (the spec they were trained with).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from mars.pipeline.config import ConfigError
from mars.pipeline.experiments import parse_setting

EVAL_COLUMNS = [
    "kind",
    "model",
    "setting",
    "method",
    "tau",
    "acceptance",
    "task",
    "family",
    "metric",
    "score",
    "stderr",
    "tokens_per_forward",
    "generated_tokens",
    "forwards",
    "eval_wall_time_s",
    "block_size",
    "cache",
    "max_gen_toks",
    "limit",
    "items",
]


def _item_scores(record: dict, metric: str) -> dict:
    """{item: its primary-metric value} over the record's samples (an item is the harness task and document id;
    values that are not one number, e.g. lists, left out): for differences paired by test item. A filtered metric
    (``exact_match,flexible-extract``) is the bare name in the samples of that filter (the harness keeps one sample
    per document and filter)."""
    name, _, wanted = metric.partition(",")
    items = {}
    for sample in record.get("samples") or []:
        if sample.get("filter", "none") != (wanted or "none"):
            continue
        value = (sample.get("metrics") or {}).get(name)
        if isinstance(value, (bool, int, float)) and "doc_id" in sample:
            items[f"{sample.get('task')}/{sample['doc_id']}"] = float(value)
    return items


def load_eval(path: Path) -> dict:
    try:
        record = json.loads(Path(path).read_text())
        metric = record["primary_metric"]
        value = record["metrics"][metric]["value"]
    except (OSError, ValueError, KeyError) as exc:
        raise ConfigError(f"evaluation result {path} is unreadable or incomplete: {exc}") from None
    stderr = record["metrics"][metric].get("stderr")
    args = record.get("model_args", {})
    return {
        "task": record["task"],
        "family": record["family"],
        "metric": metric,
        "score": 100.0 * float(value),  # percent, as the paper reports
        "stderr": 100.0 * float(stderr) if isinstance(stderr, (int, float)) else math.nan,
        "tokens_per_forward": float(record["decoding"]["tokens_per_forward"]),
        "generated_tokens": int(record["decoding"]["generated_tokens"]),
        "forwards": int(record["decoding"]["forwards"]),
        "eval_wall_time_s": float(record["decoding"].get("eval_wall_time_s", math.nan)),
        # the decoding settings the number came from, as the evaluation recorded them
        "block_size": args.get("block_size"),
        "cache": args.get("cache"),
        "max_gen_toks": record.get("eval_args", {}).get("max_gen_toks"),
        "limit": record.get("eval_args", {}).get("limit"),
        "items": _item_scores(record, metric),
    }


def collect_evals(paths: list[str | Path]) -> pd.DataFrame:
    """One row per result file: kind, model, setting (method, tau, metric), family, score (%), tokens per forward,
    and the decoding settings."""
    rows = []
    for path in map(Path, paths):
        setting_dir = path.parent
        method, tau, metric = parse_setting(setting_dir.name)
        rows.append(
            {
                "kind": setting_dir.parent.parent.name,
                "model": setting_dir.parent.name,
                "setting": setting_dir.name,
                "method": method,
                "tau": tau,
                "acceptance": metric,
                **load_eval(path),
            }
        )
    return pd.DataFrame(rows, columns=EVAL_COLUMNS)


def read_json(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path} is missing or unreadable: {exc}") from None


def training_cost(models_dir: str | Path, model: str) -> dict:
    """Optimizer steps and wall time of a trained model (for compute-matched comparisons; both summed over the
    invocations of a resumed run), and the time of the invocations before its last (0.0: never resumed)."""
    metrics = read_json(Path(models_dir) / model / "metrics.json")
    return {
        "optimizer_steps": metrics.get("optimizer_steps", math.nan),
        "train_wall_time_s": metrics.get("train_runtime_s") or metrics.get("wall_time_s", math.nan),
        "wall_time_s_before_resume": metrics.get("wall_time_s_before_resume", 0.0),
    }


def read_benchmark(path: str | Path) -> dict:
    """One Snakemake ``benchmark:`` file: wall seconds and peak resident memory (MB) of the job."""
    frame = pd.read_csv(path, sep="\t")
    if frame.empty or "s" not in frame or "max_rss" not in frame:
        raise ConfigError(f"{path} is not a Snakemake benchmark file")
    max_rss = pd.to_numeric(frame["max_rss"], errors="coerce")
    return {"job_wall_time_s": float(frame["s"].iloc[-1]), "peak_rss_mb": float(max_rss.iloc[-1])}
