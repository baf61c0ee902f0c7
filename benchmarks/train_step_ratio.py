"""MARS training-step time / AR SFT training-step time on the same batches and model (issue: target <= 2.2x).

The paper paid 2.2x (33 vs 15 H200-hours at 0.5B).  Each repetition times one optimizer step (forward, backward,
AdamW) of AR SFT (TRL's SFTTrainer) and of each MARS variant on the SAME batch, interleaved so machine drift
cancels; medians are reported.  "dense" is the untrimmed 2L x 2L layout, for reference.

    python benchmarks/train_step_ratio.py --world results/tiny/world   # built by `mars world` (or the workflow)
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from mars.pipeline.config import TrainSpec, load_config
from mars.training.data import build_dataset, load_records
from mars.training.train import load_init, make_trainer
from mars.world.build import build_world

VARIANTS = {
    "mars_b4": dict(method="mars", block_size=4),
    "mars_b4_dense": dict(method="mars", block_size=4, dense=True),
    "mars_b8": dict(method="mars", block_size=8),
    "mars_b16": dict(method="mars", block_size=16),
    "mars_nolar_b4": dict(method="mars", block_size=4, w_ar=0.0),
    "mars_bidir_b4": dict(method="mars", block_size=4, attention="bidirectional"),
    "block_diffusion_b4": dict(method="block_diffusion", block_size=4, w_ar=0.0),
}


def trainer_for(fields: dict, init: Path, data: Path, work: Path, batch_size: int):
    fields = dict(fields)
    dense = fields.pop("dense", False)
    spec = TrainSpec(
        init="world", learning_rate=1e-4, batch_size=batch_size, max_length=256, epochs=1, **{"w_ar": 1.0, **fields}
    )
    model, tokenizer = load_init(str(init), spec)
    dataset = build_dataset(load_records(data, "train"), tokenizer, spec)
    trainer = make_trainer(spec, model, tokenizer, dataset, work)
    if dense:
        trainer.layout = "dense"
    trainer.create_optimizer_and_scheduler(num_training_steps=1000)
    trainer.current_gradient_accumulation_steps = 1  # set by train() normally; this script times single steps
    model.train()
    return trainer


def timed_step(trainer, batch) -> float:
    start = time.perf_counter()
    trainer.training_step(trainer.model, batch)
    trainer.optimizer.step()
    trainer.optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world", type=Path, help="world folder (default: build the tiny default in a temp dir)")
    parser.add_argument("--config", default="config.yaml")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--batches", type=int, default=4, help="distinct batches")
    parser.add_argument("--reps", type=int, default=5, help="timed repetitions per batch")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path, help="write the numbers here too")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tmp = Path(tempfile.mkdtemp(prefix="mars_bench_"))
    world = args.world
    if world is None:
        world = tmp / "world"
        build_world(load_config(args.config)["world"], world)
    init, data = world / "init", world / "data"

    ar = trainer_for(dict(method="ar"), init, data, tmp / "ar", args.batch_size)
    others = {name: trainer_for(f, init, data, tmp / name, args.batch_size) for name, f in VARIANTS.items()}
    loader = iter(ar.get_train_dataloader())
    batches = [ar._prepare_inputs(next(loader)) for _ in range(args.batches)]
    times = {name: [] for name in ["ar", *others]}
    for batch in batches:
        for trainer in [ar, *others.values()]:  # warm-up
            timed_step(trainer, dict(batch))
        for _ in range(args.reps):
            times["ar"].append(timed_step(ar, dict(batch)))
            for name, trainer in others.items():
                times[name].append(timed_step(trainer, dict(batch)))
    ar_median = statistics.median(times["ar"])
    rows = {
        name: {"median_step_s": statistics.median(t), "ratio_vs_ar": statistics.median(t) / ar_median}
        for name, t in times.items()
    }
    tokens = statistics.mean(float(b["attention_mask"].sum()) / b["attention_mask"].shape[0] for b in batches)
    print(
        f"machine: {platform.processor() or platform.machine()}, torch threads {args.threads}, "
        f"batch {args.batch_size}, mean sequence {tokens:.0f} tokens, {args.batches}x{args.reps} steps each"
    )
    print(f"{'setting':22s} {'step (s)':>9s} {'vs AR':>7s}")
    for name, row in rows.items():
        print(f"{name:22s} {row['median_step_s']:9.4f} {row['ratio_vs_ar']:6.2f}x")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "rows": rows,
                    "batch_size": args.batch_size,
                    "threads": args.threads,
                    "python": sys.version.split()[0],
                    "torch": torch.__version__,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
