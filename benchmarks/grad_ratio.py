"""The two losses' gradient norms: is the AR signal outcompeted by the masked stream's in one update? (recipe study)

For each checkpoint, on the same fixed batches of the training set (``--batches`` x ``--batch-size`` records evenly
spaced over it), the gradients of L_mask and of L_AR (each divided by the batch's response targets, as training
does at w_AR = 1) are taken separately with respect to every parameter. Printed and written per checkpoint: the mean
over batches of ||g_mask||, ||g_AR||, their ratio and their cosine. A ratio well above 1 at the start of MARS
training means the masked stream dominates the summed gradient (before Adam's per-parameter scaling); w_AR = 2
halves the ratio of the weighted terms. The recipe flags follow a run's training settings (defaults: the tiny
world's; the authors' recipe: ``--loss-normalization sequence --pad-to-block eos --loss-turns last``).

    python benchmarks/grad_ratio.py --data results/tiny/world/data --output docs/recipe_study_grad_ratio.csv \\
        results/tiny/models/ar_sft_5ep results/tiny/models/mars_b4 results/tiny/models/mars_b4_war2
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from pathlib import Path

import torch

from mars.pipeline.config import TrainSpec
from mars.training.data import build_dataset, load_records
from mars.training.objective import (
    IGNORE,
    build_dual_stream,
    dual_stream_row_sums,
    normalized_stream_losses,
    pad_to_block_eos,
)
from mars.training.train import load_init


def batches(dataset, batch_size: int, count: int, pad_id: int, max_length: int):
    """``count`` batches of records evenly spaced over the whole set (every family; the file is grouped by family)."""
    step = max(1, len(dataset) // (batch_size * count))
    spread = dataset.select(range(0, len(dataset), step))
    for start in range(0, batch_size * count, batch_size):
        rows = spread[start : start + batch_size]
        ids = [r[:max_length] for r in rows["input_ids"]]
        labels = [r[:max_length] for r in rows["labels"]]
        width = max(map(len, ids))
        yield (
            torch.tensor([r + [pad_id] * (width - len(r)) for r in ids]),
            torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in ids]),
            torch.tensor([r + [IGNORE] * (width - len(r)) for r in labels]),
        )


def measure(checkpoint: str, data: str, batch_size: int, count: int, block_size: int, **recipe) -> dict:
    """``recipe``: TrainSpec's loss_normalization, pad_to_block, loss_turns and max_length (the run's settings)."""
    spec = TrainSpec(method="mars", init=checkpoint, block_size=block_size, **recipe)
    model, tokenizer = load_init(checkpoint, spec)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    dataset = build_dataset(load_records(data, "train"), tokenizer, spec)
    sums = {"g_mask": 0.0, "g_ar": 0.0, "ratio": 0.0, "cosine": 0.0}
    for ids, attention, labels in batches(dataset, batch_size, count, tokenizer.pad_token_id, spec.max_length):
        if spec.pad_to_block == "eos":
            ids, attention, labels = pad_to_block_eos(
                ids,
                attention,
                labels,
                block_size=block_size,
                eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id,
            )
        batch = build_dual_stream(ids, attention, labels, mask_token_id=tokenizer.mask_token_id, block_size=block_size)
        mask_rows, ar_rows = dual_stream_row_sums(model, batch)
        term_mask, term_ar = normalized_stream_losses(mask_rows, ar_rows, batch, spec.loss_normalization)
        g_mask = torch.autograd.grad(term_mask, params, retain_graph=True)
        g_ar = torch.autograd.grad(term_ar, params)
        norm_mask = math.sqrt(sum(float(g.pow(2).sum()) for g in g_mask))
        norm_ar = math.sqrt(sum(float(g.pow(2).sum()) for g in g_ar))
        dot = sum(float((a * b).sum()) for a, b in zip(g_mask, g_ar))
        sums["g_mask"] += norm_mask
        sums["g_ar"] += norm_ar
        sums["ratio"] += norm_mask / norm_ar
        sums["cosine"] += dot / (norm_mask * norm_ar)
    return {"checkpoint": Path(checkpoint).name, "batches": count, **{k: v / count for k, v in sums.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoints", nargs="+")
    parser.add_argument("--data", required=True, help="folder with train.jsonl")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--block-size", type=int, default=4)
    parser.add_argument("--loss-normalization", default="token", choices=["token", "sequence"])
    parser.add_argument("--pad-to-block", default="none", choices=["none", "eos"])
    parser.add_argument("--loss-turns", default="all", choices=["all", "last"])
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--output", help="CSV to write")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    recipe = {
        "loss_normalization": args.loss_normalization,
        "pad_to_block": args.pad_to_block,
        "loss_turns": args.loss_turns,
        "max_length": args.max_length,
    }
    rows = [measure(c, args.data, args.batch_size, args.batches, args.block_size, **recipe) for c in args.checkpoints]
    for r in rows:
        print(
            f"{r['checkpoint']:28s} |g_mask| {r['g_mask']:.4f}  |g_AR| {r['g_ar']:.4f}  "
            f"ratio {r['ratio']:.2f}  cosine {r['cosine']:.3f}"
        )
    if args.output:
        with open(args.output, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows([{k: round(v, 5) if isinstance(v, float) else v for k, v in r.items()} for r in rows])
    return 0


if __name__ == "__main__":
    sys.exit(main())
