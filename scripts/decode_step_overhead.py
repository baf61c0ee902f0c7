"""The decoder's own work in one ragged decode step (``mars.decoding.window.window_forward``: ids, position ids, the 4D
additive mask, the choice of logit columns), without the model: a stand-in returns zero logits at once.

Rows of a batch feed 1..3 real tokens (plus 0..3 drafts with ``--drafts``, as mars_lossless does) and 3 masks
against a cache of 200 slots, some of them invalid (the left padding of shorter prompts), so every batch size > 1
takes the explicit-mask path.

    OMP_NUM_THREADS=1 PYTHONPATH=. python scripts/decode_step_overhead.py [--drafts]
"""

from __future__ import annotations

import argparse
import timeit
import types

import torch

from mars.decoding.cache import KVCache, _Row
from mars.decoding.window import window_forward

VOCAB, CACHE, MASKS = 1024, 200, 3


class StandIn:
    """Returns zero logits of the right shape; nothing else."""

    dtype = torch.float32
    config = None  # the (unused) DynamicCache of the KVCache needs no model config

    def __call__(self, input_ids, logits_to_keep=None, **kwargs):
        if logits_to_keep is None:
            kept = input_ids.shape[1]
        else:
            kept = logits_to_keep if isinstance(logits_to_keep, int) else len(logits_to_keep)
        return types.SimpleNamespace(logits=torch.zeros(input_ids.shape[0], kept, VOCAB))

    def parameters(self):
        yield torch.zeros(1)


def ragged_step(batch: int, drafts: bool):
    g = torch.Generator().manual_seed(0)
    rows = []
    for i in range(batch):
        tokens = torch.randint(5, VOCAB, (150 + 7 * i,), generator=g).tolist()
        row = _Row(index=i, tokens=tokens, n_prompt=100, budget=10**6, uncached=tokens[-(1 + i % 3) :])
        row.drafts = [7] * (i % 4) if drafts else []
        rows.append(row)
    kv = KVCache(StandIn(), batch, torch.device("cpu"))
    valid = torch.ones(batch, CACHE, dtype=torch.bool)
    for i in range(batch):
        valid[i, : (i * 5) % 40] = False  # the left padding of shorter prompts
    kv.valid, kv.all_valid = valid, bool(valid.all())
    if hasattr(kv, "bias"):
        kv.bias = torch.zeros(batch, CACHE).masked_fill_(~valid, torch.finfo(torch.float32).min)
    tail = torch.full((batch, MASKS), 1, dtype=torch.long)
    return lambda: window_forward(StandIn(), kv, rows, tail, 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drafts", action="store_true", help="rows also feed drafts (mars_lossless)")
    parser.add_argument("--number", type=int, default=2000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for batch in (1, 4, 8, 16):
        step = ragged_step(batch, args.drafts)
        step()
        best = min(timeit.repeat(step, number=args.number, repeat=5)) / args.number
        print(f"batch {batch:2d}: {best * 1e6:7.1f} us per step (best of 5 x {args.number})")


if __name__ == "__main__":
    main()
