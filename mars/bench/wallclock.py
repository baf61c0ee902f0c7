"""``mars bench``: the wall-clock benchmark of Table 5, on GSM8K prompts.

Prompts (``prompts``): "world", the tiny world's GSM8K-like test records (``--data``/test.jsonl); "gsm8k", at
paper scale, the GSM8K test questions of the harness's ``gsm8k_cot_zeroshot`` task as it prompts them, from the
local mirror ``harness_data`` (:mod:`mars.evaluation.tasks.mirror`; None: the hub).  Each is sent as a chat user turn.
The model runs on CUDA when available (``device``) in ``dtype`` ("auto": bf16 on CUDA, fp32 on CPU); on CUDA each
timed pass ends with a synchronize, so the clock measures the GPU's work. On a CPU, ``cpu_linear: onednn_packed``
gives every setting below the same model with oneDNN-packed linear weights (:mod:`mars.decoding.cpu_linear`).

Settings, all greedy on the same model and prompts:
  ar_hf_kv          Hugging Face ``generate`` with its KV cache (the reference, speed-up 1.00)
  mars_tau1         our decoder in one-token mode (tau = 1.0, cursor cache): must cost <= 1.1x ar_hf_kv
  mars_none         MARS at tau, no cache (every step re-runs the prefix)
  mars_block_C      MARS at tau, this project's block-level cache with cache block size C (B-1 masks per window)
  mars_authors_block_C  MARS at tau, the authors' block cache (their MARSBlockCachedSampler, the definition of the
                    paper's Table 5 numbers): the whole cache block of C positions is the window, re-run per step
  mars_cursor       MARS at tau, the exact per-sequence cursor cache
  mars_lossless     lossless self-speculative MARS at tau, cursor cache: exactly the greedy tokens (our addition)
  prompt_lookup     Hugging Face prompt-lookup decoding (``prompt_lookup_num_tokens``): the peer a user would
                    pick instead; transformers' assisted generation takes one sequence at a time, so a batch is
                    decoded sequence by sequence
``settings`` (the config's ``bench.settings``) picks which of them are timed; it must include ar_hf_kv and mars_cursor.
Each batch size is measured with one warm-up pass and ``reps`` timed passes per setting, interleaved (setting
order rotates each repetition) so machine drift cancels; medians are reported.

Decode efficiency: on the same model, batch and context, ``t1`` = one cached forward of 1 token per row and
``tw`` = one cached forward of a window (ceil(TPF) accepted tokens + B-1 masks per row).  The ideal speed-up of a
cached multi-token decoder over AR is TPF * t1 / tw; efficiency = measured speed-up of mars_cursor / ideal.  The
forwards are timed at the middle of a decode (the prompts grown by half a row's generated tokens), ``forward_reps``
rounds, widths alternating; quartiles give the ideal's range, and each repetition's speed-up over the AR pass of the
same repetition gives the measured range (``*_min`` / ``*_max``).  A ragged batch feeds each forward at the width of
its widest row: ``fed_window_tokens`` is the mean width actually fed, and ``width_efficiency`` = tw / t(fed) the
part of the ideal lost to forwards wider than the ideal's window (padding to the widest row; at batch 1, where
nothing is padded, only the difference between ceil(TPF) and the accepted counts actually fed, near 1.0); the rest
of the gap is the decode loop's own work.
"""

from __future__ import annotations

import csv
import io
import math
import os
import platform
import statistics
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from mars.decoding.cache import KVCache, _Row
from mars.decoding.cpu_linear import CPU_LINEARS, use_cpu_linear
from mars.decoding.engine import generate
from mars.decoding.generation import default_window, encode_prompts, load_model
from mars.decoding.window import window_forward
from mars.fileio import write_json_atomic, write_text_atomic
from mars.pipeline.config import ConfigError, check_bench_settings, schema_defaults
from mars.training.data import load_records

SETTINGS = tuple(schema_defaults("bench")["settings"])  # every decoder of the module docstring, in timing order


def _sync(model) -> None:
    """Wait for the GPU: CUDA kernels run asynchronously, a timer read before they finish measures nothing."""
    device = next(model.parameters()).device
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def machine_info() -> dict:
    import transformers

    return {
        "machine": platform.machine(),
        "processor": platform.processor(),
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
    }


class Runner:
    """Runs one setting over all prompts at one batch size; returns (seconds, generated tokens, forwards)."""

    def __init__(self, model, tokenizer, prompts: list[list[int]], block_size: int, tau: float, max_new_tokens: int):
        self.model, self.tok, self.prompts = model, tokenizer, prompts
        self.block_size, self.tau, self.max_new = block_size, tau, max_new_tokens
        self.eos, self.pad = tokenizer.eos_token_id, tokenizer.pad_token_id
        self.widths: dict[tuple, float] = {}  # (method, tau, cache, batch size) -> mean window width of its forwards

    def batches(self, batch_size: int):
        for start in range(0, len(self.prompts), batch_size):
            yield self.prompts[start : start + batch_size]

    def ours(self, batch_size: int, *, tau: float, cache: str, cache_block_size: int = 32, method: str = "mars"):
        tokens = forwards = steps = slots = 0
        _sync(self.model)
        start = time.perf_counter()
        for batch in self.batches(batch_size):
            stats: dict = {}
            outs = generate(
                self.model,
                batch,
                method=method,
                block_size=self.block_size,
                tau=tau,
                cache=cache,
                cache_block_size=cache_block_size,
                max_new_tokens=self.max_new,
                eos_token_ids=[self.eos],
                pad_token_id=self.pad,
                mask_token_id=self.tok.mask_token_id,
                stats=stats,
            )
            tokens += sum(len(o.token_ids) for o in outs)
            forwards += sum(o.forwards for o in outs)
            steps, slots = steps + stats.get("window_steps", 0), slots + stats.get("window_slots", 0)
        _sync(self.model)
        seconds = time.perf_counter() - start
        self.widths[(method, tau, cache, batch_size)] = slots / steps if steps else 0.0
        return seconds, tokens, forwards

    def _hf(self, batch: list[list[int]], **kwargs):
        width = max(len(p) for p in batch)
        device = next(self.model.parameters()).device
        ids = torch.tensor([[self.pad] * (width - len(p)) + p for p in batch], device=device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch], device=device)
        with torch.inference_mode():
            out = self.model.generate(
                input_ids=ids,
                attention_mask=mask,
                do_sample=False,
                max_new_tokens=self.max_new,
                eos_token_id=self.eos,
                pad_token_id=self.pad,
                **kwargs,
            )
        generated = out[:, width:]
        count = 0
        for row in generated.tolist():
            n = len(row)
            if self.eos in row:
                n = row.index(self.eos) + 1
            count += n
        return count

    def hf_greedy(self, batch_size: int):
        _sync(self.model)
        start, tokens = time.perf_counter(), 0
        for batch in self.batches(batch_size):
            tokens += self._hf(batch)
        _sync(self.model)
        return time.perf_counter() - start, tokens, None

    def prompt_lookup(self, batch_size: int, lookup: int = 4):
        _sync(self.model)
        start, tokens = time.perf_counter(), 0
        for batch in self.batches(batch_size):
            for prompt in batch:  # assisted generation in transformers takes batch size 1
                tokens += self._hf([prompt], prompt_lookup_num_tokens=lookup)
        _sync(self.model)
        return time.perf_counter() - start, tokens, None


def forward_costs(
    model,
    prompts: list[list[int]],
    batch_size: int,
    window: int,
    mask_id: int,
    pad_id: int,
    *,
    context: int = 0,
    reps: int = 40,
    fed_width: int | None = None,
) -> dict:
    """Seconds of one cached forward of 1 token and of ``window`` tokens per row (1 real token + window - 1 masks),
    same batch and cache: the prompts each grown by ``context`` tokens (the middle of a decode, where its forwards
    are on average). The two widths alternate over ``reps`` pairs on one cache, so that machine drift hits both
    alike; a single forward is milliseconds, so one pair says little and the medians of many are reported, with
    their 25th and 75th percentiles. ``fed_width`` adds a third width, timed the same way (``tfed``)."""
    batch = [list(p) + (list(p) * (context // max(len(p), 1) + 1))[:context] for p in prompts[:batch_size]]
    device = next(model.parameters()).device
    with torch.inference_mode():
        rows = [
            _Row(index=i, tokens=list(p), n_prompt=len(p), budget=10**6, uncached=list(p)) for i, p in enumerate(batch)
        ]
        kv = KVCache(model, len(rows), device)
        empty = torch.zeros(len(rows), 0, dtype=torch.long, device=device)
        _, valid = window_forward(model, kv, rows, empty, pad_id)
        kv.commit(valid, keep=valid.shape[1])  # the context, cached once; each timed forward is cropped again
        cached = kv.length
        last = [r.tokens[-1] for r in rows]
        widths = list(dict.fromkeys([1, window] + ([fed_width] if fed_width else [])))
        times: dict[int, list[float]] = {w: [] for w in widths}
        for rep in range(reps + 2):  # the first two rounds warm up
            for width in widths if rep % 2 else widths[::-1]:
                for r, token in zip(rows, last):
                    r.uncached = [token]
                tail = torch.full((len(rows), width - 1), mask_id, dtype=torch.long, device=device)
                _sync(model)
                start = time.perf_counter()
                window_forward(model, kv, rows, tail, pad_id)
                _sync(model)
                if rep >= 2:
                    times[width].append(time.perf_counter() - start)
                kv.cache.crop(cached - kv.cache.get_seq_length())  # forget the timed forward (negative count)

    def quartiles(values: list[float]) -> tuple[float, float, float]:
        q = statistics.quantiles(values, n=4)
        return q[0], statistics.median(values), q[2]

    costs = {"t1": quartiles(times[1]), "tw": quartiles(times[window])}
    if fed_width:
        costs["tfed"] = quartiles(times[fed_width])
    return costs


def run_bench(
    model_path: str,
    data_dir: str | None,
    out_dir: str,
    *,
    batch_sizes,
    num_prompts: int,
    tau: float,
    cache_block_sizes,
    reps: int,
    max_new_tokens: int,
    family: str = "gsm8k",
    threads: int = 0,
    block_size: int = 0,
    experiment: str | None = None,
    results_dir: str = "results",
    prompts: str = "world",
    harness_data: str | None = None,
    dtype: str = "auto",
    device: str | None = None,
    forward_reps: int = 40,
    cpu_linear: str = "default",
    settings=None,
) -> list[dict]:
    """The benchmark (module docstring); its settings' defaults are the config schema's (``bench`` section).
    ``settings``: the decoders to time, by the names of the module docstring (``mars_block`` and
    ``mars_authors_block`` stand for every cache block size); None: all of them."""
    settings = SETTINGS if settings is None else tuple(settings)
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        raise ConfigError(f"unknown bench setting {unknown[0]!r}; the settings are {', '.join(SETTINGS)}")
    check_bench_settings(settings, "bench settings")
    if threads:
        torch.set_num_threads(threads)
    if not 0 < tau <= 1:
        raise ConfigError(f"tau must be in (0, 1], got {tau}")
    if prompts not in ("world", "gsm8k"):
        raise ConfigError(f"prompts must be 'world' or 'gsm8k', got {prompts!r}")
    if prompts == "world" and not data_dir:
        raise ConfigError("--data (the world's data folder with test.jsonl) is required for prompts 'world'")
    if cpu_linear not in CPU_LINEARS:  # (before the model is loaded)
        raise ConfigError(f"cpu_linear must be one of {', '.join(CPU_LINEARS)}, got {cpu_linear!r}")
    model, tokenizer = load_model(model_path, dtype=dtype, device=device)
    kernel = use_cpu_linear(model, cpu_linear)  # (every setting below decodes this same model, the reference too)
    if tokenizer.mask_token_id is None:
        raise ConfigError(f"{model_path}: the tokenizer has no mask token; mars bench needs a MARS model")
    block_size = block_size or default_window(model_path, "mars") or 0
    if block_size < 2:
        raise ConfigError(f"{model_path}: not a MARS checkpoint (no trained block size); give --block-size")
    if prompts == "gsm8k":
        from mars.evaluation.tasks.mirror import gsm8k_bench_prompts

        texts = gsm8k_bench_prompts(harness_data, num_prompts)
        source = f"gsm8k test ({harness_data or 'hub'})"
    else:
        records = [r for r in load_records(data_dir, "test") if r.get("family", family) == family][:num_prompts]
        texts = [r["prompt"] for r in records]
        source = f"{data_dir}/test.jsonl"
    if not texts:
        raise ConfigError(f"no {family} prompts in {source}")
    prompt_ids = encode_prompts(tokenizer, texts)
    runner = Runner(model, tokenizer, prompt_ids, block_size, tau, max_new_tokens)
    decoders = {
        "ar_hf_kv": lambda b: runner.hf_greedy(b),
        "mars_tau1": lambda b: runner.ours(b, tau=1.0, cache="cursor"),
        "mars_none": lambda b: runner.ours(b, tau=tau, cache="none"),
        **{
            f"mars_block_{c}": (lambda b, c=c: runner.ours(b, tau=tau, cache="block", cache_block_size=c))
            for c in cache_block_sizes
        },
        **{
            f"mars_authors_block_{c}": (
                lambda b, c=c: runner.ours(b, tau=tau, cache="authors_block", cache_block_size=c)
            )
            for c in cache_block_sizes
        },
        "mars_cursor": lambda b: runner.ours(b, tau=tau, cache="cursor"),
        "mars_lossless": lambda b: runner.ours(b, tau=tau, cache="cursor", method="mars_lossless"),
        "prompt_lookup": lambda b: runner.prompt_lookup(b),
    }
    cached = ("mars_block_", "mars_authors_block_")  # (one decoder per cache block size)
    decoders = {
        name: run
        for name, run in decoders.items()
        if (name.rsplit("_", 1)[0] if name.startswith(cached) else name) in settings
    }
    rows: list[dict] = []
    total = len(batch_sizes) * (reps + 1) * len(decoders)
    bar = tqdm(total=total, desc="bench")
    for batch_size in batch_sizes:
        measured = {name: [] for name in decoders}
        names = list(decoders)
        for rep in range(reps + 1):  # rep 0 is the warm-up
            for name in names[rep % len(names) :] + names[: rep % len(names)]:
                seconds, tokens, forwards = decoders[name](batch_size)
                if rep:
                    measured[name].append((seconds, tokens, forwards))
                bar.update(1)
        ar_seconds = statistics.median(m[0] for m in measured["ar_hf_kv"])
        ar_tps = statistics.median(m[1] / m[0] for m in measured["ar_hf_kv"])
        for name, runs in measured.items():
            seconds = statistics.median(r[0] for r in runs)
            tokens = runs[0][1]
            tps = statistics.median(r[1] / r[0] for r in runs)
            forwards = runs[0][2]
            # the spread: each repetition's speed-up over the AR pass of the same repetition (interleaved, so both
            # saw the same state of the machine)
            paired = [(r[1] / r[0]) / (a[1] / a[0]) for r, a in zip(runs, measured["ar_hf_kv"])]
            rows.append(
                {
                    "batch_size": batch_size,
                    "setting": name,
                    "tokens": tokens,
                    "time_s": seconds,
                    "tokens_per_s": tps,
                    "speedup_vs_ar_kv": tps / ar_tps,
                    "speedup_min": min(paired),
                    "speedup_max": max(paired),
                    "time_vs_ar_kv": seconds / ar_seconds,
                    "tokens_per_forward": tokens / forwards if forwards else None,
                }
            )
        cursor = next(r for r in rows if r["batch_size"] == batch_size and r["setting"] == "mars_cursor")
        window = math.ceil(cursor["tokens_per_forward"]) + block_size - 1
        # the widths the cursor decode actually fed: a ragged batch pads each forward to its widest row
        fed = runner.widths[("mars", tau, "cursor", batch_size)]
        costs = forward_costs(
            model,
            prompt_ids,
            batch_size,
            window,
            tokenizer.mask_token_id,
            tokenizer.pad_token_id,
            context=cursor["tokens"] // (2 * len(prompt_ids)),  # half of a row's generated tokens
            reps=forward_reps,
            fed_width=max(round(fed), 1),
        )
        (t1_lo, t1, t1_hi), (tw_lo, tw, tw_hi) = costs["t1"], costs["tw"]
        ideal = cursor["tokens_per_forward"] * t1 / tw
        cursor.update(
            {
                "t_1token_s": t1,
                "t_window_s": tw,
                "window_tokens": window,
                "fed_window_tokens": fed,
                # the part of the ideal lost to the widths actually fed (module docstring): t(window) / t(fed)
                "width_efficiency": tw / costs["tfed"][1],
                "ideal_speedup": ideal,
                # the ideal's range from the forward costs' quartiles (lowest: fast 1-token, slow window forwards)
                "ideal_min": cursor["tokens_per_forward"] * t1_lo / tw_hi,
                "ideal_max": cursor["tokens_per_forward"] * t1_hi / tw_lo,
                "decode_efficiency": cursor["speedup_vs_ar_kv"] / ideal,
                "decode_efficiency_min": cursor["speedup_min"] / ideal,
                "decode_efficiency_max": cursor["speedup_max"] / ideal,
            }
        )
    bar.close()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fields = [
        "batch_size",
        "setting",
        "tokens",
        "time_s",
        "tokens_per_s",
        "speedup_vs_ar_kv",
        "speedup_min",
        "speedup_max",
        "time_vs_ar_kv",
        "tokens_per_forward",
        "t_1token_s",
        "t_window_s",
        "window_tokens",
        "fed_window_tokens",
        "width_efficiency",
        "ideal_speedup",
        "ideal_min",
        "ideal_max",
        "decode_efficiency",
        "decode_efficiency_min",
        "decode_efficiency_max",
    ]
    table = io.StringIO(newline="")
    writer = csv.DictWriter(table, fieldnames=fields)
    writer.writeheader()
    writer.writerows(rows)
    meta = {
        "model": str(model_path),
        "tau": tau,
        "block_size": block_size,
        "num_prompts": len(prompt_ids),
        "prompts": source,
        "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
        "device": str(next(model.parameters()).device),
        "cpu_linear": kernel,
        "max_new_tokens": max_new_tokens,
        "reps": reps,
        "forward_reps": forward_reps,
        "family": family,
        "settings": list(settings),
        "machine": machine_info(),
        "rows": rows,
    }
    write_json_atomic(out / "bench.json", meta)
    write_text_atomic(out / "bench.csv", table.getvalue())
    log_bench(model_path, out, rows, meta, experiment, results_dir)
    return rows


def log_bench(model_path, out: Path, rows: list[dict], meta: dict, experiment: str | None, results_dir: str) -> None:
    """One MLflow run per benchmark, in the trained model's experiment, with the CSV and JSON as artifacts."""
    from mars.pipeline.tracking import log_measurement

    metrics = [
        {
            f"{r['setting']}_b{r['batch_size']}_{k}": r[k]
            for k in ("tokens_per_s", "speedup_vs_ar_kv", "tokens_per_forward", "decode_efficiency")
            if r.get(k) is not None
        }
        for r in rows
    ]
    params = {k: v for k, v in meta.items() if k not in ("rows", "machine")}
    log_measurement(
        "bench", model_path, [out / "bench.csv", out / "bench.json"], params=params, metric_rows=metrics,
        experiment=experiment, results_dir=results_dir,
    )  # fmt: skip
