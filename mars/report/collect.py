"""Read the pipeline's outputs into flat tables.

Evaluation results live at ``<results>/<name>/eval/<model>/<setting>/<task>.json`` (one ``mars eval`` result per
file), where ``setting`` is ``<method>-tau<tau>-<metric>`` (:func:`setting_name`).  Trained models live at
``<results>/<name>/models/<model>/`` with ``metrics.json`` (optimizer steps, wall time).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

# Task families in the paper's column order, the tiny profile's task names, and the paper's lm-eval names.
FAMILIES = ("ifeval", "bbh", "mmlu_pro", "gpqa", "gsm8k", "humaneval")
TINY_TASKS = {f: f"tiny_{f}" for f in FAMILIES}


def setting_name(method: str, tau: float, metric: str = "probability") -> str:
    return f"{method}-tau{float(tau):g}-{metric}"


def parse_setting(setting: str) -> tuple[str, float, str]:
    method, tau, metric = setting.split("-")
    return method, float(tau[3:]), metric


def load_eval(path: Path) -> dict:
    record = json.loads(Path(path).read_text())
    metric = record["primary_metric"]
    value = record["metrics"][metric]["value"]
    stderr = record["metrics"][metric].get("stderr")
    return {
        "task": record["task"], "family": record["family"], "metric": metric,
        "score": 100.0 * float(value),  # percent, as the paper reports
        "stderr": 100.0 * float(stderr) if isinstance(stderr, (int, float)) else math.nan,
        "tokens_per_forward": float(record["decoding"]["tokens_per_forward"]),
        "generated_tokens": int(record["decoding"]["generated_tokens"]),
        "forwards": int(record["decoding"]["forwards"]),
        "eval_wall_time_s": float(record["decoding"].get("eval_wall_time_s", math.nan)),
    }


def collect_evals(eval_dir: str | Path, paths: list[str | Path] | None = None) -> pd.DataFrame:
    """One row per result file: model, setting (method, tau, metric), family, score (%), tokens per forward..."""
    eval_dir = Path(eval_dir)
    files = [Path(p) for p in paths] if paths is not None else sorted(eval_dir.glob("*/*/*.json"))
    rows = []
    for path in files:
        setting_dir = path.parent
        method, tau, metric = parse_setting(setting_dir.name)
        rows.append({"model": setting_dir.parent.name, "setting": setting_dir.name, "method": method, "tau": tau,
                     "acceptance": metric, **load_eval(path)})
    columns = ["model", "setting", "method", "tau", "acceptance", "task", "family", "metric", "score", "stderr",
               "tokens_per_forward", "generated_tokens", "forwards", "eval_wall_time_s"]
    return pd.DataFrame(rows, columns=columns)


def training_cost(models_dir: str | Path, model: str) -> dict:
    """Optimizer steps and wall time of a trained model (for compute-matched comparisons)."""
    path = Path(models_dir) / model / "metrics.json"
    if not path.is_file():
        return {"optimizer_steps": math.nan, "train_wall_time_s": math.nan}
    metrics = json.loads(path.read_text())
    return {"optimizer_steps": metrics.get("optimizer_steps", math.nan),
            "train_wall_time_s": metrics.get("train_runtime_s") or metrics.get("wall_time_s", math.nan)}
