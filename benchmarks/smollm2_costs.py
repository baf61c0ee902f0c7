"""What SmolLM2-135M-Instruct costs on this machine: the numbers that size configs/smollm2-135m.yaml (docs/smollm2.md).

    python benchmarks/smollm2_costs.py --model <mars import-smollm2 folder> --data results/tiny/world/data

Prints, for the tiny world's training records rendered with the model's chat template:
- token lengths (mean, 95th percentile, max) of the training records under the recipe's labels;
- seconds per optimizer step of AR SFT and of MARS B=4 (forward + backward over ``--step-examples`` records in
  micro-batches of ``--micro``; AdamW's update is not included), fp32 and bf16 autocast;
- the cached forward cost at context ``--context``: one token vs a window of 1 + (B-1) masks per row, at batch 1, 4,
  16, fp32 weights and bf16 weights (median of ``--reps`` interleaved repetitions): the ratio that bounds MARS's
  wall-clock speed-up (ideal = tokens per forward x t(1) / t(window)).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache

from mars.pipeline.config import TrainSpec
from mars.training.data import build_dataset, load_records
from mars.training.objective import IGNORE, build_dual_stream, dual_stream_loss, pad_to_block_eos


def micro_batches(rows, micro: int, pad_id: int):
    for start in range(0, len(rows["input_ids"]), micro):
        ids = rows["input_ids"][start : start + micro]
        labels = rows["labels"][start : start + micro]
        width = max(map(len, ids))
        yield (
            torch.tensor([r + [pad_id] * (width - len(r)) for r in ids]),
            torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in ids]),
            torch.tensor([r + [IGNORE] * (width - len(r)) for r in labels]),
        )


def step_seconds(model, rows, micro, tokenizer, method: str, bf16: bool) -> float:
    start = time.perf_counter()
    context = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else torch.autocast("cpu", enabled=False)
    n = sum(1 for label in sum(rows["labels"], []) if label != IGNORE)
    for ids, attention, labels in micro_batches(rows, micro, tokenizer.pad_token_id):
        with context:
            if method == "ar":
                logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1].float()
                target = labels[:, 1:]
                loss = torch.nn.functional.cross_entropy(logits[target != IGNORE], target[target != IGNORE]) / n
            else:
                ids, attention, labels = pad_to_block_eos(
                    ids,
                    attention,
                    labels,
                    block_size=4,
                    eos_token_id=tokenizer.eos_token_id,
                    pad_token_id=tokenizer.pad_token_id,
                )
                batch = build_dual_stream(ids, attention, labels, mask_token_id=tokenizer.mask_token_id, block_size=4)
                loss, _ = dual_stream_loss(model, batch, 1.0, normalization="sequence")
        loss.backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def forward_costs(model, context: int, batch: int, reps: int) -> tuple[float, float]:
    """Median seconds of a cached forward of 1 token and of a 4-token window per row, after ``context`` tokens."""
    high = min(20000, model.config.vocab_size)
    prefix = torch.randint(100, high, (batch, context))
    with torch.inference_mode():
        cache = DynamicCache(config=model.config)
        model(input_ids=prefix, past_key_values=cache, use_cache=True)
        times = {1: [], 4: []}
        for rep in range(reps + 1):
            for width in (1, 4) if rep % 2 else (4, 1):
                x = torch.randint(100, high, (batch, width))
                start = time.perf_counter()
                model(input_ids=x, past_key_values=cache, use_cache=True)
                elapsed = time.perf_counter() - start
                cache.crop(-width)
                if rep:
                    times[width].append(elapsed)
    return statistics.median(times[1]), statistics.median(times[4])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--step-examples", type=int, default=16)
    parser.add_argument("--micro", type=int, default=4)
    parser.add_argument("--context", type=int, default=200)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    spec = TrainSpec(method="mars", init=args.model, max_length=512, loss_turns="last")
    records = load_records(args.data, "train")
    dataset = build_dataset(records, tokenizer, spec)
    lengths = sorted(len(ids) for ids in dataset["input_ids"])
    print(
        f"records {len(lengths)}: tokens mean {statistics.mean(lengths):.0f}, "
        f"p95 {lengths[int(0.95 * len(lengths))]}, max {lengths[-1]}"
    )
    by_family = {}
    for record, ids in zip(records, dataset["input_ids"]):
        by_family.setdefault(record.get("family"), []).append(len(ids))
    print("  per family: " + ", ".join(f"{k} {statistics.mean(v):.0f}" for k, v in by_family.items()), flush=True)
    # a step of records spread over the set (every family), the same for every measurement
    every = max(1, len(dataset) // args.step_examples)
    rows = dataset.select(range(0, len(dataset), every))[: args.step_examples]
    model.train()
    for method in ("ar", "mars"):
        step_seconds(model, rows, args.micro, tokenizer, method, False)  # warm-up
        seconds = statistics.median(step_seconds(model, rows, args.micro, tokenizer, method, False) for _ in range(2))
        print(f"step of {args.step_examples} examples, {method:4s} fp32: {seconds:.1f} s", flush=True)
    # bf16 autocast: one micro-batch, once per method (it is far slower here, see docs/smollm2.md)
    few = dataset.select(range(0, len(dataset), every))[: args.micro]
    for method in ("ar", "mars"):
        fp32 = step_seconds(model, few, args.micro, tokenizer, method, False)
        bf16 = step_seconds(model, few, args.micro, tokenizer, method, True)
        print(
            f"one micro-batch of {args.micro}, {method:4s}: fp32 {fp32:.1f} s, bf16 autocast {bf16:.1f} s", flush=True
        )
    model.eval()
    for dtype in (torch.float32, torch.bfloat16):
        model.to(dtype)
        for batch in (1, 4, 16):
            one, window = forward_costs(model, args.context, batch, args.reps)
            print(
                f"forward {str(dtype).split('.')[1]:8s} batch {batch:2d}: 1 token {1000 * one:.1f} ms, "
                f"window of 4 {1000 * window:.1f} ms, ratio {window / one:.2f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
