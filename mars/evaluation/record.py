"""The result record of one ``mars eval`` task: the harness results, the decoding statistics and the samples
as one JSON object (written by :mod:`mars.evaluation.evaluate`).

Result schema (``schema_version`` 1), keys in order:

    schema_version, kind ("mars_eval"), task, family, profile, created (ISO time)
    model             {path, name, trained_block_size (MARS / block diffusion; else null), trained_mlflow_run_id,
                      trained_spec}
    tau               the acceptance threshold (also in model_args)
    model_args        exact generation arguments: tau, block_size, cache, cache_block_size, metric, method,
                      mask_token_id, pretrained, batch_size, device, dtype, max_length, eos_token_ids, pad_token_id
    eval_args         limit, batch_size, max_gen_toks, apply_chat_template, fewshot_as_multiturn, num_fewshot,
                      data_dir, bootstrap_iters; until (the stop sequences that replaced the tasks' own) and
                      kernels ("reproducible") where given
    primary_metric    key into metrics (the benchmark's headline number)
    metrics           {name: {value, stderr}}; name is the harness metric ("exact_match"), with ",<filter>"
                      appended when the harness used a filter other than "none"; stderr null where the harness
                      has none ("N/A", e.g. IFEval's instruction-level accuracy)
    subtasks          {harness subtask: {metrics, n_samples}} (groups such as tiny_bbh; {} otherwise)
    decoding          generated_tokens, forwards, tokens_per_forward (= generated_tokens / forwards, summed over
                      the task's requests), requests, model_calls (batched forward calls), decode_wall_time_s,
                      tokens_per_second, eval_wall_time_s (whole simple_evaluate call, scoring included),
                      truncated_prompts (prompts left-truncated to max_length - max_gen_toks, as HFLM does)
    n_samples         {harness task: {original, effective}}
    n_shot, versions, task_configs     from the harness results ("n-shot", "versions", "configs")
    lm_eval_version, git_commit
    mlflow            {run_id, experiment, tracking_uri}
    machine           the CPU, the kernels in effect and their mode, threads, library versions (mars.repro)
    samples           one per (document, filter): task, doc_id, id, prompt (the exact chat-templated context),
                      generation (the model's text, post-truncated at the stop strings), filtered (after the
                      harness filters), target (the scoring target), reference (the record's gold response,
                      tiny profile), filter, metrics {name: value}, generated_tokens, forwards, tokens_per_forward,
                      chunks (tokens produced by each forward), token_ids (the decoder's tokens, EOS included:
                      token_ids split by chunks = the tokens of each forward, Figure 1), prompt_tokens, truncated
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1


def _split_metrics(entry: dict) -> dict[str, dict[str, Any]]:
    """Harness result entry {"exact_match,none": v, "exact_match_stderr,none": s, ...} -> {name: {value, stderr}}."""
    out: dict[str, dict[str, Any]] = {}
    for key, value in entry.items():
        if "," not in key or isinstance(value, (dict, list)):
            continue
        metric, filt = key.split(",", 1)
        if metric.endswith("_stderr"):
            continue
        stderr = entry.get(f"{metric}_stderr,{filt}")
        if not isinstance(stderr, (int, float)) or isinstance(stderr, bool):
            stderr = None
        name = metric if filt == "none" else f"{metric},{filt}"
        out[name] = {"value": value, "stderr": stderr}
    return out


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _leaves(results: dict, name: str) -> list[str]:
    subtasks = results.get("group_subtasks", {})
    if name not in subtasks:
        return [name]
    leaves: list[str] = []
    for child in subtasks[name]:
        leaves.extend(_leaves(results, child) if child in subtasks else [child])
    return leaves


def build_record(
    results: dict,
    *,
    task: str,
    family: str,
    profile: str,
    lm,
    model_path: Path,
    run_config: dict,
    eval_args: dict,
    eval_wall_time_s: float,
    primary_metric: str,
) -> dict:
    from mars.checkpoints import trained_block_size
    from mars.evaluation.tasks.hooks import decode_target

    leaves = _leaves(results, task)
    entry = results.get("results", {}).get(task) or results.get("groups", {}).get(task) or {}
    subtasks = {}
    if leaves != [task]:
        for leaf in leaves:
            subtasks[leaf] = {
                "metrics": _split_metrics(results["results"].get(leaf, {})),
                "n_samples": results.get("n-samples", {}).get(leaf),
            }

    per_task = lm.stats_by_task()
    per_request = {(r["task"], r["doc_id"]): r for r in lm.decode_stats["requests"]}
    gen = sum(per_task.get(leaf, {}).get("generated_tokens", 0) for leaf in leaves)
    fwd = sum(per_task.get(leaf, {}).get("forwards", 0) for leaf in leaves)
    decode_wall = sum(per_task.get(leaf, {}).get("wall_time_s", 0.0) for leaf in leaves)
    decoding_stats = {
        "generated_tokens": gen,
        "forwards": fwd,
        "tokens_per_forward": gen / fwd if fwd else 0.0,
        "requests": sum(per_task.get(leaf, {}).get("requests", 0) for leaf in leaves),
        "model_calls": lm.decode_stats["model_calls"],
        "decode_wall_time_s": decode_wall,
        "tokens_per_second": gen / decode_wall if decode_wall > 0 else 0.0,
        "eval_wall_time_s": eval_wall_time_s,
        "truncated_prompts": sum(per_task.get(leaf, {}).get("truncated_prompts", 0) for leaf in leaves),
    }

    samples = []
    for leaf in leaves:
        for s in results.get("samples", {}).get(leaf, []):
            doc = s.get("doc") or {}
            stats = per_request.get((leaf, s.get("doc_id")), {})
            resps = s.get("resps") or [[""]]
            first = resps[0][0] if resps and resps[0] else ""
            filtered = s.get("filtered_resps") or [""]
            args = s.get("arguments") or [[""]]
            samples.append(
                {
                    "task": leaf,
                    "doc_id": s.get("doc_id"),
                    "id": doc.get("id") if isinstance(doc, dict) else None,
                    "prompt": args[0][0] if args and args[0] else "",
                    "generation": first,
                    "filtered": filtered[0] if len(filtered) == 1 else filtered,
                    "target": decode_target(doc) if profile == "tiny" else s.get("target"),
                    "reference": doc.get("response") if profile == "tiny" else None,
                    "filter": s.get("filter"),
                    "metrics": {m: s.get(m) for m in s.get("metrics", [])},
                    "generated_tokens": stats.get("generated_tokens"),
                    "forwards": stats.get("forwards"),
                    "tokens_per_forward": stats.get("tokens_per_forward"),
                    "chunks": stats.get("chunks"),
                    "token_ids": stats.get("token_ids"),
                    "prompt_tokens": stats.get("prompt_tokens"),
                    "truncated": stats.get("truncated"),
                }
            )

    import lm_eval

    from mars.pipeline.tracking import git_commit

    names = [task, *[leaf for leaf in leaves if leaf != task]]
    record = {
        "schema_version": SCHEMA_VERSION,
        "kind": "mars_eval",
        "task": task,
        "family": family,
        "profile": profile,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "model": {
            "path": str(model_path),
            "name": model_path.name,
            "trained_block_size": trained_block_size(model_path),
            "trained_mlflow_run_id": run_config.get("mlflow_run_id"),
            "trained_spec": run_config.get("spec"),
        },
        "tau": lm.decoding_args["tau"],
        "model_args": lm.model_args(),
        "eval_args": eval_args,
        "primary_metric": primary_metric,
        "metrics": _split_metrics(entry),
        "subtasks": subtasks,
        "decoding": decoding_stats,
        "n_samples": {leaf: results.get("n-samples", {}).get(leaf) for leaf in leaves},
        "n_shot": {n: results.get("n-shot", {}).get(n) for n in names if n in results.get("n-shot", {})},
        "versions": {n: results.get("versions", {}).get(n) for n in names if n in results.get("versions", {})},
        "task_configs": {leaf: results.get("configs", {}).get(leaf) for leaf in leaves},
        "lm_eval_version": getattr(lm_eval, "__version__", "unknown"),
        "git_commit": git_commit(),
        "mlflow": None,
        "samples": samples,
    }
    return _jsonable(record)


_MLFLOW_BAD = re.compile(r"[^0-9A-Za-z_\-. :/]")


def mlflow_metric_name(name: str) -> str:
    return _MLFLOW_BAD.sub("_", name)


def mlflow_metrics(record: dict) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, m in record["metrics"].items():
        if isinstance(m.get("value"), (int, float)):
            out[mlflow_metric_name(name)] = float(m["value"])
        if isinstance(m.get("stderr"), (int, float)):
            out[mlflow_metric_name(name) + "_stderr"] = float(m["stderr"])
    for key in (
        "tokens_per_forward",
        "generated_tokens",
        "forwards",
        "requests",
        "model_calls",
        "decode_wall_time_s",
        "tokens_per_second",
        "eval_wall_time_s",
        "truncated_prompts",
    ):
        out[key] = float(record["decoding"][key])
    return out
