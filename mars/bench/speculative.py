"""``mars speculate``: the paper's Table 6, speculative decoding measured (batch 1) on the GSM8K-like prompts.

Four checkpoints of one tokenizer: an AR and a MARS target, an AR and a MARS draft (smaller models). Rows, each over
the same prompts one at a time, timed by the wall clock with the job's torch threads:

    target_ar_tau1      the AR target alone, greedy (the accuracy reference of the AR-target rows)
    target_mars_tau1    the MARS target alone at tau = 1.0 (one-token mode: greedy; the reference of the others)
    ar_ar               AR draft -> AR target (plain greedy speculative decoding: exactly the target's output)
    ar_mars             AR draft -> MARS target (one mask group per acceptance count, accepted at tau)
    mars_mars           MARS draft (its own MARS decoding at tau) -> MARS target
    lossless            the MARS target alone, lossless self-speculative (``generate(method="mars_lossless")``)

Per row: accuracy (%) of the completions as the evaluation scores them -- the tiny world's gsm8k task (its primary
metric through :func:`mars.evaluation.tasks.hooks.process_results`), or at paper scale the installed lm-eval
``gsm8k_cot_zeroshot`` task's own filter and metric (``exact_match,flexible-extract``) -- and its change from the
row's target at tau = 1.0; generated tokens, seconds, tokens/s, speed-up over ar_ar (tokens/s ratio); target
forwards, tokens and extra tokens (beyond the accepted drafts: bonus / correction and MARS predictions) per target
forward; drafts proposed and accepted; draft forwards. ``identical_to_target_tau1`` is the share of prompts whose
tokens equal the target's greedy ones (1.0 for every lossless row: ar_ar, lossless). spec.json adds every row's
generated token ids per prompt.
"""

from __future__ import annotations

import csv
import io
import time
from pathlib import Path
from types import SimpleNamespace

import torch
from tqdm.auto import tqdm

from mars.decoding.engine import generate
from mars.decoding.generation import encode_prompts, load_model, truncate_at_stop
from mars.decoding.speculative import speculative_generate
from mars.fileio import write_json_atomic, write_text_atomic
from mars.pipeline.config import ConfigError
from mars.training.data import load_records

ROLES = ("target_ar", "target_mars", "draft_ar", "draft_mars")
# (row, draft kind, target kind, the reference row of its accuracy change)
ROWS = (
    ("target_ar_tau1", "none", "ar", "target_ar_tau1"),
    ("target_mars_tau1", "none", "mars", "target_mars_tau1"),
    ("ar_ar", "ar", "ar", "target_ar_tau1"),
    ("ar_mars", "ar", "mars", "target_mars_tau1"),
    ("mars_mars", "mars", "mars", "target_mars_tau1"),
    ("lossless", "self", "mars", "target_mars_tau1"),
)
FIELDS = (
    "row",
    "draft",
    "target",
    "draft_model",
    "target_model",
    "k",
    "tau",
    "accuracy",
    "accuracy_change_vs_target_tau1",
    "identical_to_target_tau1",
    "tokens",
    "time_s",
    "tokens_per_s",
    "speedup_vs_ar_ar",
    "target_forwards",
    "tokens_per_target_forward",
    "extra_tokens_per_target_forward",
    "drafts_proposed",
    "drafts_accepted",
    "draft_forwards",
)


def _sync(model) -> None:
    device = next(model.parameters()).device
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ----------------------------------------------------------------------------------------------------------------
# prompts and scoring, as the evaluation's


def token_stops(tokenizer, until: list[str]) -> list[list[int]]:
    """The stop strings the decoder can stop at token by token: the evaluation model's own rule."""
    from mars.evaluation.lm_eval_model import MARSLM

    return MARSLM._token_stops(SimpleNamespace(tokenizer=tokenizer), until)


def world_task(data_dir: str, num_prompts: int):
    """The tiny world's GSM8K-like test records; a completion is scored by the tiny gsm8k task's primary metric."""
    from mars.evaluation.tasks import PRIMARY_METRIC, STOP
    from mars.evaluation.tasks.hooks import process_results

    records = [r for r in load_records(data_dir, "test") if r.get("family") == "gsm8k"][:num_prompts]
    if not records:
        raise ConfigError(f"no gsm8k records in {data_dir}/test.jsonl")
    metric = PRIMARY_METRIC["gsm8k"]
    return [r["prompt"] for r in records], [STOP], lambda text, i: float(process_results(records[i], [text])[metric])


def harness_task(harness_data: str | None, num_prompts: int):
    """The harness's gsm8k_cot_zeroshot questions; a completion is scored by that task's own filter and metric
    (the paper profile's primary metric, ``exact_match,flexible-extract``)."""
    from lm_eval.api.registry import get_metric
    from lm_eval.filters import build_filter_ensemble
    from lm_eval.utils import apply_template

    from mars.evaluation.tasks import PAPER_PRIMARY_METRIC
    from mars.evaluation.tasks.mirror import gsm8k_bench_docs

    cfg, docs = gsm8k_bench_docs(harness_data, num_prompts)
    if not docs:
        raise ConfigError(f"no GSM8K test questions in {harness_data or 'the hub'}")
    metric_name, filter_name = PAPER_PRIMARY_METRIC["gsm8k"].split(",")
    entry = next((f for f in cfg["filter_list"] if f["name"] == filter_name), None)
    metric = next((m for m in cfg["metric_list"] if m["metric"] == metric_name), None)
    if entry is None or metric is None:
        raise ConfigError(f"the installed lm-eval's {cfg['task']} has no {PAPER_PRIMARY_METRIC['gsm8k']}")
    ensemble = build_filter_ensemble(
        filter_name, [(f["function"], {k: v for k, v in f.items() if k != "function"}) for f in entry["filter"]]
    )
    options = {k: v for k, v in metric.items() if k not in ("metric", "aggregation", "higher_is_better")}
    score_fn = get_metric(metric_name)

    def score(text: str, i: int) -> float:
        resps, doc = [[text]], [docs[i]]
        for step in ensemble.filters:
            resps = step().apply(resps, doc)
        answer = list(resps)[0]
        reference = apply_template(cfg["doc_to_target"], docs[i])
        return float(score_fn(references=[reference], predictions=[answer], **options)[metric_name])

    until = list(cfg.get("generation_kwargs", {}).get("until", []))
    return [apply_template(cfg["doc_to_text"], doc) for doc in docs], until, score


# ----------------------------------------------------------------------------------------------------------------
# the measurement


def _same_tokenizer(models: dict, tokenizers: dict, paths: dict) -> None:
    vocab = tokenizers["target_mars"].get_vocab()
    for role in ROLES:
        tok = tokenizers[role]
        if tok.get_vocab() != vocab or tok.mask_token_id != tokenizers["target_mars"].mask_token_id:
            raise ConfigError(f"{paths[role]} does not share the tokenizer (and mask token) of {paths['target_mars']}")
    if tokenizers["target_mars"].mask_token_id is None:
        raise ConfigError(f"{paths['target_mars']}: the tokenizer has no mask token; a MARS target needs one")


def run_speculate(
    paths: dict,
    data_dir: str | None,
    out_dir: str,
    *,
    k: int,
    tau: float,
    num_prompts: int,
    max_new_tokens: int,
    block_size: int,
    threads: int = 0,
    metric: str = "probability",
    dtype: str = "auto",
    prompts: str = "world",
    harness_data: str | None = None,
    models: dict | None = None,
    experiment: str | None = None,
    results_dir: str = "results",
    device: str | None = None,
) -> list[dict]:
    """The Table 6 measurement (module docstring). ``paths``: {role: checkpoint folder} for ROLES; ``models``: their
    config names (recorded only)."""
    if threads:
        torch.set_num_threads(threads)
    if not 0 < tau <= 1:
        raise ConfigError(f"tau must be in (0, 1], got {tau}")
    if k < 1 or block_size < 2:
        raise ConfigError(f"k must be >= 1 and the block size >= 2, got k={k}, block_size={block_size}")
    from mars.checkpoints import trained_block_size

    for role in ("target_mars", "draft_mars"):  # both MARS models decode with one window: it must be how they trained
        trained = trained_block_size(paths[role])
        if trained is not None and trained != block_size:
            raise ConfigError(f"{role} {paths[role]} was trained with block size {trained}, not {block_size}")
    if prompts == "world":
        if not data_dir:
            raise ConfigError("--data (the world's data folder with test.jsonl) is required for prompts 'world'")
        texts, until, score = world_task(data_dir, num_prompts)
    elif prompts == "gsm8k":
        texts, until, score = harness_task(harness_data, num_prompts)
    else:
        raise ConfigError(f"prompts must be 'world' or 'gsm8k', got {prompts!r}")
    loaded = {role: load_model(paths[role], dtype=dtype, device=device) for role in ROLES}
    nets = {role: m for role, (m, _) in loaded.items()}
    tokenizers = {role: t for role, (_, t) in loaded.items()}
    _same_tokenizer(nets, tokenizers, paths)
    tok = tokenizers["target_mars"]
    prompt_ids = encode_prompts(tok, texts)
    eos = [tok.eos_token_id]
    from lm_eval.models.utils import handle_stop_sequences

    until = handle_stop_sequences(until, eos=tok.decode(eos))  # (the evaluation appends the EOS text too)
    stops = token_stops(tok, until)
    common = dict(max_new_tokens=max_new_tokens, eos_token_ids=eos, mask_token_id=tok.mask_token_id)

    def alone(role: str, method: str):
        def run(prompt):
            stats: dict = {}  # mars_lossless: drafts fed for verification, drafts accepted
            out = generate(
                nets[role],
                [prompt],
                method=method,
                block_size=block_size,
                tau=1.0 if method != "mars_lossless" else tau,
                metric=metric,
                pad_token_id=tok.pad_token_id,
                stop_sequences=stops,
                stats=stats,
                **common,
            )[0]
            accepted = int(stats.get("accepted_drafts", 0))
            return out.token_ids, out.forwards, 0, int(stats.get("drafts", 0)), accepted

        return run

    def speculative(draft_role: str, target_role: str, draft_mode: str, target_mode: str):
        def run(prompt):
            out = speculative_generate(
                nets[draft_role],
                nets[target_role],
                [prompt],
                k=k,
                draft_mode=draft_mode,
                target_mode=target_mode,
                block_size=block_size,
                tau=tau,
                metric=metric,
                stop_sequences=stops,
                **common,
            )[0]
            return out.token_ids, out.target_forwards, out.draft_forwards, sum(out.proposed), sum(out.accepted)

        return run

    runners = {
        "target_ar_tau1": ("target_ar", alone("target_ar", "ar")),
        "target_mars_tau1": ("target_mars", alone("target_mars", "mars")),
        "ar_ar": ("target_ar", speculative("draft_ar", "target_ar", "ar", "ar")),
        "ar_mars": ("target_mars", speculative("draft_ar", "target_mars", "ar", "mars")),
        "mars_mars": ("target_mars", speculative("draft_mars", "target_mars", "mars", "mars")),
        "lossless": ("target_mars", alone("target_mars", "mars_lossless")),
    }
    drafts_of = {"ar": "draft_ar", "mars": "draft_mars"}
    measured: dict[str, dict] = {}
    bar = tqdm(total=len(ROWS) * (len(prompt_ids) + 1), desc="speculate")
    for name, draft_kind, target_kind, _ in ROWS:
        target_role, run = runners[name]
        run(prompt_ids[0])  # warm-up (not timed)
        bar.update(1)
        outs = []
        _sync(nets[target_role])
        start = time.perf_counter()
        for prompt in prompt_ids:
            outs.append(run(prompt))
            bar.update(1)
        _sync(nets[target_role])
        seconds = time.perf_counter() - start
        texts_out = [tok.decode(o[0], skip_special_tokens=True) for o in outs]
        scores = [score(truncate_at_stop(t, until), i) for i, t in enumerate(texts_out)]
        measured[name] = {
            "outs": outs,
            "accuracy": 100.0 * sum(scores) / len(scores),
            "seconds": seconds,
            "draft_role": drafts_of.get(draft_kind),
            "target_role": target_role,
        }
    bar.close()
    rows = []
    names = models or {}
    ar_ar_seconds = None
    for name, draft_kind, target_kind, reference in ROWS:
        m, ref = measured[name], measured[reference]
        outs = m["outs"]
        tokens = sum(len(o[0]) for o in outs)
        forwards = sum(o[1] for o in outs)
        accepted = sum(o[4] for o in outs)
        tps = tokens / m["seconds"] if m["seconds"] > 0 else float("nan")
        if name == "ar_ar":
            ar_ar_seconds = m["seconds"]
        rows.append(
            {
                "row": name,
                "draft": draft_kind,
                "target": target_kind,
                "draft_model": names.get(m["draft_role"], paths.get(m["draft_role"])) if m["draft_role"] else "",
                "target_model": names.get(m["target_role"], paths[m["target_role"]]),
                "k": k if draft_kind in ("ar", "mars") else None,
                # (AR draft -> AR target is greedy: no threshold)
                "tau": 1.0 if draft_kind == "none" else (None if name == "ar_ar" else tau),
                "accuracy": m["accuracy"],
                "accuracy_change_vs_target_tau1": m["accuracy"] - ref["accuracy"],
                "identical_to_target_tau1": sum(o[0] == r[0] for o, r in zip(outs, ref["outs"])) / len(outs),
                "tokens": tokens,
                "time_s": m["seconds"],
                "tokens_per_s": tps,
                "speedup_vs_ar_ar": None,
                "target_forwards": forwards,
                "tokens_per_target_forward": tokens / forwards,
                "extra_tokens_per_target_forward": (tokens - accepted) / forwards,
                "drafts_proposed": sum(o[3] for o in outs),
                "drafts_accepted": accepted,
                "draft_forwards": sum(o[2] for o in outs),
            }
        )
    for row in rows:  # the paper's speed-up: AR/AR's time over the row's, on the same prompts (582 s / 457 s = 1.27x)
        row["speedup_vs_ar_ar"] = ar_ar_seconds / row["time_s"]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    table = io.StringIO(newline="")
    writer = csv.DictWriter(table, fieldnames=FIELDS)
    writer.writeheader()
    writer.writerows(rows)
    from mars.bench.wallclock import machine_info

    meta = {
        "checkpoints": {role: str(paths[role]) for role in ROLES},
        "models": names,
        "k": k,
        "tau": tau,
        "block_size": block_size,
        "metric": metric,
        "num_prompts": len(prompt_ids),
        "prompts": prompts if prompts == "gsm8k" else f"{data_dir}/test.jsonl",
        "harness_data": harness_data,
        "max_new_tokens": max_new_tokens,
        "dtype": str(next(nets["target_mars"].parameters()).dtype).removeprefix("torch."),
        "device": str(next(nets["target_mars"].parameters()).device),
        "machine": machine_info(),
        "rows": rows,
        # every row's generated tokens per prompt (the lossless rows must match their target's greedy ones)
        "token_ids": {name: [o[0] for o in measured[name]["outs"]] for name in measured},
    }
    write_json_atomic(out / "spec.json", meta)
    write_text_atomic(out / "spec.csv", table.getvalue())
    log_speculate(paths["target_mars"], out, rows, meta, experiment, results_dir)
    return rows


def log_speculate(target: str, out: Path, rows: list[dict], meta: dict, experiment: str | None, results_dir: str):
    """One MLflow run per measurement, in the config's experiment, with the CSV and JSON as artifacts."""
    from mars.pipeline.tracking import log_measurement

    metrics = [
        {f"{r['row']}_{k}": r[k] for k in ("accuracy", "tokens_per_s", "speedup_vs_ar_ar", "tokens_per_target_forward")}
        for r in rows
    ]
    params = {k: v for k, v in meta.items() if k not in ("rows", "machine", "checkpoints", "models", "token_ids")}
    params.update({f"model_{role}": name for role, name in (meta["models"] or {}).items()})
    log_measurement(
        "speculate", target, [out / "spec.csv", out / "spec.json"], params=params, metric_rows=metrics,
        experiment=experiment, results_dir=results_dir,
    )  # fmt: skip
