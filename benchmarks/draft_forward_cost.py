"""Why Table 6's speculative decoding gains nothing in the tiny world: the cost of a draft forward against a target
forward, batch 1, on a KV cache (the paper's 0.5B draft does about 1/15 of its 7B target's arithmetic).

Each repetition times one cached forward of ``width`` random tokens after a 60-token context, then crops it from the
cache again; the first 20 repetitions warm up; medians are reported.

    python benchmarks/draft_forward_cost.py --draft results/tiny/models/draft_ar_sft_5ep \
        --target results/tiny/models/ar_sft_5ep --threads 2
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import AutoModelForCausalLM, DynamicCache


def forward_seconds(model, width: int, reps: int, context: int = 60, warmup: int = 20) -> float:
    vocab = model.config.vocab_size
    times = []
    with torch.inference_mode():
        cache = DynamicCache()
        model(torch.randint(10, vocab, (1, context)), past_key_values=cache, use_cache=True)
        for rep in range(reps + warmup):
            x = torch.randint(10, vocab, (1, width))
            start = time.perf_counter()
            model(x, past_key_values=cache, use_cache=True)
            elapsed = time.perf_counter() - start
            cache.crop(-width)  # forget the timed tokens (a negative count in transformers 5)
            if rep >= warmup:
                times.append(elapsed)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draft", required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--k", type=int, default=4, help="drafts per verification (the verification forward is k + 1 wide)")
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cost = {}
    for role, path in (("draft", args.draft), ("target", args.target)):
        model = AutoModelForCausalLM.from_pretrained(path).eval()
        params = sum(p.numel() for p in model.parameters())
        one, verify = forward_seconds(model, 1, args.reps), forward_seconds(model, args.k + 1, args.reps)
        cost[role] = one
        print(f"{role}: {params / 1e6:.2f}M parameters; 1-token forward {one * 1e3:.3f} ms, "
              f"{args.k + 1}-token forward {verify * 1e3:.3f} ms")  # fmt: skip
        if role == "target":
            cost["verify"] = verify
    print(f"draft / target 1-token forward: {cost['draft'] / cost['target']:.2f}")
    round_ms = (args.k * cost["draft"] + cost["verify"]) * 1e3
    print(f"{args.k} draft forwards + 1 verification: {round_ms:.2f} ms (target alone: {cost['target'] * 1e3:.3f} ms "
          "per token; divide the round by the measured tokens per target forward to compare)")  # fmt: skip


if __name__ == "__main__":
    main()
