"""The serving decoder's own capacity, without HTTP or a load client: the control for benchmarks/serve_load.py.

    python benchmarks/decoder_capacity.py --model CKPT --data results/tiny/world/data [--family gsm8k] [--reps 2]
        [--cpu-linear onednn_packed]

The family's first ``--num-prompts`` test questions (chat template) are all queued at once on a
:class:`~mars.serving.batcher.ContinuousBatcher` (``--max-batch`` rows; a finished row is replaced from the queue
between forwards, as ``mars serve`` does), one thread. Prints, per setting and repetition: output tokens per second,
forwards, mean rows per forward, tokens per row-forward and milliseconds per forward. If the ratio of tau 0.9's
tokens/s to tau 1.0's here matches the served ratio, the decoder (the cost of a batched window), not the serving
layer, caps what MARS adds under load.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from mars.checkpoints import trained_block_size
from mars.decoding.cpu_linear import CPU_LINEARS, use_cpu_linear
from mars.decoding.generation import encode_prompts, load_model
from mars.serving.batcher import ContinuousBatcher

SETTINGS = (("mars", 1.0), ("mars", 0.9), ("mars", 0.8), ("mars_lossless", 0.9))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", required=True, type=Path)
    parser.add_argument("--family", default="gsm8k")
    parser.add_argument("--num-prompts", type=int, default=100)
    parser.add_argument("--max-batch", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--cpu-linear", default="default", choices=CPU_LINEARS, help="as mars serve --cpu-linear")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model, tokenizer = load_model(args.model, device="cpu")  # (one thread: this measures the CPU decoder)
    use_cpu_linear(model, args.cpu_linear)
    print(f"{args.model}, cpu_linear {args.cpu_linear}, {args.num_prompts} questions, max batch {args.max_batch}")
    records = [json.loads(line) for line in open(args.data / "test.jsonl")]
    questions = [r["prompt"] for r in records if r["family"] == args.family][: args.num_prompts]
    prompts = encode_prompts(tokenizer, questions)
    kw = dict(  # as mars serve builds its batcher
        block_size=trained_block_size(args.model),
        eos_token_ids=[tokenizer.eos_token_id],
        pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
        mask_token_id=tokenizer.mask_token_id,
    )
    for rep in range(args.reps):
        for method, tau in SETTINGS:
            batcher = ContinuousBatcher(model, method=method, **kw)
            queue = list(prompts)
            while queue and batcher.active < args.max_batch:
                batcher.add(queue.pop(0), max_new_tokens=args.max_tokens, tau=tau)
            forwards = row_forwards = tokens = 0
            start = time.perf_counter()
            while batcher.active:
                row_forwards += batcher.active
                for event in batcher.step():
                    tokens += len(event.tokens)
                    if event.finished and queue:
                        batcher.add(queue.pop(0), max_new_tokens=args.max_tokens, tau=tau)
                forwards += 1
            seconds = time.perf_counter() - start
            print(
                f"rep {rep} {method} tau {tau}: {tokens / seconds:.0f} tokens/s, {forwards} forwards, "
                f"{row_forwards / forwards:.1f} rows/forward, {tokens / row_forwards:.2f} tokens/row-forward, "
                f"{seconds / forwards * 1e3:.1f} ms/forward",
                flush=True,
            )


if __name__ == "__main__":
    main()
