"""What each job runs with: the complete, resolved settings of every ``mars train``, ``eval``, ``bench``,
``speculate`` and ``report table`` job, built from a validated config and the experiments' declaration
(:mod:`mars.pipeline.experiments`). The workflow passes each as one Snakemake param (:func:`as_param`: canonical
JSON, so a changed value reruns the job and nothing else); the command line reads it back with ``--job``
(:func:`parse_job`).
"""

from __future__ import annotations

import json
from pathlib import Path

from mars.pipeline.config import ConfigError, schema_defaults, train_spec
from mars.pipeline.experiments import (
    KIND_FAMILIES,
    LOSSLESS,
    STUDY_TABLE,
    decode_method,
    real_data_dir,
    replicates,
    speculative_models,
    study_models,
    study_points,
    table_models,
    table_rows,
    table_settings,
    trained_properties,
)


def decoding_block_size(config: dict, model: str, method: str) -> int:
    """The window a model is decoded with: its trained block size; Jacobi (of an AR model) the configured window;
    plain AR decoding has none (1)."""
    if method == "jacobi":
        return config["eval"]["jacobi_block_size"]
    if method in ("mars", LOSSLESS, "block_diffusion"):
        props = trained_properties(config, model)
        if props["block_size"] is None:
            raise ConfigError(
                f"model {model!r} is not a MARS or block-diffusion model; it cannot be decoded with method {method}"
            )
        return props["block_size"]
    return 1


def eval_job(config: dict, model: str, method: str, tau: float, metric: str, kind: str) -> dict:
    """Every setting of one ``mars eval`` job (keys are its ``evaluate()`` arguments)."""
    ev = config["eval"]
    # the real tasks of a tiny world run the paper profile on the workflow's own mirror of their data
    profile = "paper" if kind == "real" else ev["profile"]
    harness_data = real_data_dir(config) if kind == "real" else ev["harness_data"]
    # (the paper profile's mirror folder is part of the job: pointing it elsewhere reruns the evaluations)
    mirror = {"harness_data": harness_data} if profile == "paper" else {}
    return {
        # paper: the family names, which `mars eval --profile paper` maps to the harness's tasks (gsm8k_cot_zeroshot)
        "tasks": ",".join(f"{'tiny_' if profile == 'tiny' else ''}{f}" for f in KIND_FAMILIES[kind]),
        "profile": profile,
        "method": method,
        "tau": float(tau),
        "metric": metric,
        "block_size": decoding_block_size(config, model, method),
        "cache": ev["cache"],
        "cache_block_size": ev["cache_block_size"] if ev["cache"] == "block" else None,  # (only the block cache)
        "limit": ev["limit"],
        "batch_size": ev["batch_size"],
        "max_gen_toks": ev["max_gen_toks"],
        "dtype": ev["dtype"],
        **mirror,
        "experiment": config["name"],
        # a reproducible run decodes with the kernels it trains with (native, the default, stays out of the param)
        **({"kernels": "reproducible"} if config["training"].get("kernels") == "reproducible" else {}),
    }


def train_job(config: dict, model: str) -> dict:
    """Every setting of one ``mars train`` job: the merged training entry, the mask token, the experiment."""
    spec = train_spec(config, model).to_dict()
    # settings a method does not use stay out of its param: a new training.w_ar must not retrain the AR models
    unused = {
        "lm": ("block_size", "w_ar", "attention"),
        "ar": ("block_size", "w_ar", "attention"),
        "block_diffusion": ("attention",),
    }.get(spec["method"], ())
    # how the job is launched is not what it computes (the effective batch is the config's): the train rule hands
    # these to mars.launch as resources, never in this param, so that they rerun nothing
    launch = ("accelerate_config", "processes")
    # keys added later that are unset stay out too, so that adding them retrains nothing
    unset = ("grad_accum", "effective_batch", "architecture", "base_model", "layers", "stop_at_step", "resume_from")
    spec = {k: v for k, v in spec.items() if k not in unused and k not in launch and not (k in unset and v is None)}
    if spec.get("targets") == "gold":  # (added later, at its default)
        del spec["targets"]
    if spec.get("kernels") == "native":  # (added later, at its default)
        del spec["kernels"]
    return {"model": model, "spec": spec, "mask_token": config["world"].get("mask_token"), "experiment": config["name"]}


def bench_job(config: dict) -> dict:
    """Every setting of the ``mars bench`` job. Its prompts: the tiny world's GSM8K-like test records, or at paper
    scale (an hf world, whose SFT records hold no GSM8K) the GSM8K test questions of the harness's gsm8k task, from
    ``eval.harness_data`` (null: the hub)."""
    bench = dict(config["bench"])  # threads included: the thread count decides the measurement
    model = bench.pop("model")
    defaults = schema_defaults("bench")
    for key in ("cpu_linear", "settings"):  # (keys added later: at their defaults they rerun no finished bench)
        if bench.get(key) == defaults[key]:
            del bench[key]
    tiny = config["world"]["kind"] == "tiny"
    prompts = {"prompts": "world"} if tiny else {"prompts": "gsm8k", "harness_data": config["eval"]["harness_data"]}
    return {
        **bench,
        "block_size": decoding_block_size(config, model, "mars"),
        "dtype": config["eval"]["dtype"],
        **prompts,
        "experiment": config["name"],
    }


def speculate_job(config: dict) -> dict:
    """Every setting of the ``mars speculate`` job (Table 6): the section's numbers, the MARS window, the prompts
    (as the benchmark's: the tiny world's GSM8K-like test records, or the harness's GSM8K test questions) and how a
    completion is scored (the tiny gsm8k task's primary metric, or the harness task's)."""
    roles = speculative_models(config)
    # threads included: the thread count decides the measurement
    spec = {k: v for k, v in config["speculative"].items() if k not in roles}
    tiny = config["world"]["kind"] == "tiny"
    prompts = {"prompts": "world"} if tiny else {"prompts": "gsm8k", "harness_data": config["eval"]["harness_data"]}
    return {
        **spec,
        "block_size": decoding_block_size(config, config["speculative"]["target_mars"], "mars"),
        "metric": config["eval"]["metric"],
        "dtype": config["eval"]["dtype"],
        **prompts,
        "models": speculative_models(config),
        "experiment": config["name"],
    }


def table_job(config: dict, table: str) -> dict:
    """What a table job lays out: its rows, the paper's model size, and what it checks against the checkpoints (every
    model a row names and the models they were trained from, for the cumulative cost)."""
    models = set(table_models(config, table)) | {s.model for s in table_settings(config, table)}
    return {
        "table": table,
        "rows": [r.to_dict() for r in table_rows(config, table)],
        "paper_model_size": config["report"]["paper_model_size"],
        "experiment": config["name"],
        "models": {
            m: {
                "trained": trained_properties(config, m),
                "init": config["models"][m]["init"] if m in config["models"] else None,
            }
            for m in sorted(models)
        },
    }


def as_param(job: dict) -> str:
    """A job's settings as one canonical JSON string: Snakemake compares it with the last run's (params trigger)."""
    return json.dumps(job, sort_keys=True, separators=(",", ":"))


def parse_job(text: str, allowed: tuple[str, ...] | None = None) -> dict:
    """A job's settings from the command line (``--job``): a JSON object, or ``@file`` holding one."""
    if text.startswith("@"):
        try:
            text = Path(text[1:]).read_text()
        except OSError as exc:
            raise ConfigError(f"--job file cannot be read: {exc}") from None
    try:
        job = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--job is not valid JSON: {exc.msg} at character {exc.pos}") from None
    if not isinstance(job, dict):
        raise ConfigError("--job must be a JSON object")
    unknown = sorted(set(job) - set(allowed)) if allowed is not None else []
    if unknown:
        raise ConfigError(f"--job has unknown setting {unknown[0]!r}; expected some of {', '.join(allowed)}")
    return job


def study_job(config: dict) -> dict:
    """What the scaling table lays out: the points, the taus, each role's extra-seed runs (default point)."""
    if not config.get("study"):
        raise ConfigError("the config has no 'study' section: the scaling table needs one")
    return {
        "table": STUDY_TABLE,
        "points": study_points(config),
        "taus": [float(t) for t in config["study"]["taus"]],
        "metric": config["eval"]["metric"],
        "replicates": {m: replicates(config, m) for m in study_models(config) if replicates(config, m)},
        "methods": {m: decode_method(config, m) for m in study_models(config)},
        "experiment": config["name"],
    }
