"""``python -m mars.bench.gpu_check``: the paper-scale cost measurements on randomly initialised Qwen2.5-shaped models.

Nothing is downloaded: the models are ``Qwen2ForCausalLM`` with Qwen2.5-0.5B-Instruct's / Qwen2.5-7B-Instruct's
published shapes and random weights, which is all that the cost of a step depends on.  Two measurements:

``train``   one optimizer step (forward, backward, AdamW) of AR SFT vs the MARS dual-stream objective at the paper's
            max length, same batch: seconds per step and peak accelerator memory (paper: MARS about 2.2x the time
            and 1.5x the memory of AR SFT).
``window``  one cached forward of 1 token per row vs of a B-token window per row after a fixed context, at batch
            1/4/8/16: t(1) and t(B), from which the ideal speed-up of a B-token decoder at TPF tokens per forward is
            TPF * t(1) / t(B) (the curve Table 5's decode efficiency is measured against).

``--small`` swaps the shapes for a few-layer model so that the script runs on a CPU in seconds (tested); the numbers
of a small run say nothing about the paper.  Output: one JSON object on stdout (and ``--output FILE``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
from transformers import DynamicCache, Qwen2Config, Qwen2ForCausalLM

from mars.fileio import write_json_atomic
from mars.training.objective import build_dual_stream, dual_stream_loss

# Published shapes (config.json of the Qwen2.5-*-Instruct checkpoints).
SHAPES = {
    "qwen2.5-0.5b": dict(
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        vocab_size=151936,
        tie_word_embeddings=True,
    ),
    "qwen2.5-7b": dict(
        hidden_size=3584,
        intermediate_size=18944,
        num_hidden_layers=28,
        num_attention_heads=28,
        num_key_value_heads=4,
        vocab_size=152064,
        tie_word_embeddings=False,
    ),
    "small": dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=512,
        tie_word_embeddings=True,
    ),
}
MASK_ID = 7  # any id with an embedding row (Qwen2.5 uses the reserved <|fim_pad|>)


def make_model(shape: str, device: str, dtype: torch.dtype) -> Qwen2ForCausalLM:
    config = Qwen2Config(**SHAPES[shape], max_position_embeddings=4096, attn_implementation="sdpa")
    torch.manual_seed(0)
    return Qwen2ForCausalLM(config).to(device=device, dtype=dtype)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _peak_reset(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _peak_mb(device: str) -> float | None:
    return torch.cuda.max_memory_allocated() / 2**20 if device.startswith("cuda") else None


def sft_batch(batch: int, length: int, vocab: int, device: str) -> dict[str, torch.Tensor]:
    """A full-length batch whose second half is the response (labels -100 on the prompt half)."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(10, vocab, (batch, length), generator=generator)
    labels = ids.clone()
    labels[:, : length // 2] = -100
    return {k: v.to(device) for k, v in dict(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels).items()}


def train_step_cost(model, inputs, method: str, block_size: int, device: str, reps: int) -> dict:
    """Median seconds of one AdamW step and the peak memory over the steps (the first step, which allocates the
    optimizer state, is a warm-up and is included in the peak)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    model.train()
    _peak_reset(device)
    times = []
    for step in range(reps + 1):
        _sync(device)
        start = time.perf_counter()
        with torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16, enabled=device != "cpu"):
            if method == "ar":
                loss = model(**inputs).loss
            else:
                dual = build_dual_stream(
                    inputs["input_ids"],
                    inputs["attention_mask"],
                    inputs["labels"],
                    mask_token_id=MASK_ID,
                    block_size=block_size,
                )
                loss, _ = dual_stream_loss(model, dual, 1.0)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        _sync(device)
        if step:
            times.append(time.perf_counter() - start)
    del optimizer
    return {"s_per_step": statistics.median(times), "peak_mb": _peak_mb(device), "loss": float(loss.detach())}


@torch.no_grad()
def window_cost(model, batch: int, context: int, window: int, device: str, reps: int) -> dict:
    """Median seconds of one cached forward of ``window`` tokens per row after ``context`` cached tokens.

    Also checks the window forward against the 1-token one: the first position's logits must agree (same context,
    same token), so the two timings measure the same computation."""
    model.eval()
    generator = torch.Generator().manual_seed(2)
    vocab = model.config.vocab_size
    prefix = torch.randint(10, vocab, (batch, context), generator=generator).to(device)
    step = torch.randint(10, vocab, (batch, window), generator=generator).to(device)
    cache = DynamicCache(config=model.config)
    model(input_ids=prefix, past_key_values=cache, use_cache=True)
    results = {}
    logits = {}
    for width in (1, window):
        positions = torch.arange(context, context + width, device=device).expand(batch, -1)
        times = []
        for rep in range(reps + 1):
            _sync(device)
            start = time.perf_counter()
            out = model(input_ids=step[:, :width], position_ids=positions, past_key_values=cache, use_cache=True)
            _sync(device)
            if rep:
                times.append(time.perf_counter() - start)
            cache.crop(-width)  # transformers 5: a negative count removes that many
        logits[width] = out.logits[:, 0].float()
        results[f"t{width}_s" if width == 1 else "tw_s"] = statistics.median(times)
        results[f"t{width}_spread" if width == 1 else "tw_spread"] = [min(times), max(times)]
    results["first_token_max_abs_diff"] = float((logits[1] - logits[window]).abs().max())
    results["ratio_tw_t1"] = results["tw_s"] / results["t1_s"]
    return results


def run(
    shapes: list[str],
    device: str,
    max_length: int,
    train_batch: int,
    block_size: int,
    reps: int,
    batch_sizes: list[int],
    context: int,
) -> dict:
    dtype = torch.bfloat16 if device != "cpu" else torch.float32
    report = {
        "device": torch.cuda.get_device_name() if device.startswith("cuda") else "cpu",
        "dtype": str(dtype),
        "max_length": max_length,
        "train_batch": train_batch,
        "block_size": block_size,
        "shapes": {},
    }
    for shape in shapes:
        entry: dict = {}
        # Training keeps fp32 master weights under bf16 autocast, as the Trainer does with bf16=True.
        model = make_model(shape, device, torch.float32)
        entry["parameters"] = sum(p.numel() for p in model.parameters())
        inputs = sft_batch(train_batch, max_length, model.config.vocab_size, device)
        try:
            for method in ("ar", "mars"):
                entry[f"train_{method}"] = train_step_cost(model, inputs, method, block_size, device, reps)
                print(f"[gpu_check] {shape} train {method}: {entry[f'train_{method}']}", file=sys.stderr)
            ar, mars = entry["train_ar"], entry["train_mars"]
            entry["mars_over_ar_time"] = mars["s_per_step"] / ar["s_per_step"]
            if ar["peak_mb"]:
                entry["mars_over_ar_memory"] = mars["peak_mb"] / ar["peak_mb"]
        except torch.OutOfMemoryError as exc:  # 7B full fine-tuning needs sharding across GPUs (FSDP)
            entry["train_error"] = f"out of memory: {str(exc).splitlines()[0]}"
        del model
        _peak_reset(device)
        model = make_model(shape, device, dtype)
        entry["window"] = {}
        for batch in batch_sizes:
            entry["window"][str(batch)] = window_cost(model, batch, context, block_size, device, reps)
            print(f"[gpu_check] {shape} window batch {batch}: {entry['window'][str(batch)]}", file=sys.stderr)
        del model
        _peak_reset(device)
        report["shapes"][shape] = entry
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mars.bench.gpu_check", description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a few-layer model (CPU smoke run)")
    parser.add_argument("--shapes", default="qwen2.5-0.5b,qwen2.5-7b")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--train-batch", type=int, default=8, help="per-device batch of the paper configs")
    parser.add_argument("--block-size", type=int, default=4)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--batch-sizes", default="1,4,8,16")
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--output")
    args = parser.parse_args(argv)
    shapes = ["small"] if args.small else args.shapes.split(",")
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        print(f"error: unknown shape {unknown[0]!r} (known: {', '.join(SHAPES)})", file=sys.stderr)
        return 2
    report = run(
        shapes,
        args.device,
        args.max_length,
        args.train_batch,
        args.block_size,
        args.reps,
        [int(b) for b in args.batch_sizes.split(",")],
        args.context,
    )
    if args.output:
        write_json_atomic(args.output, report)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
