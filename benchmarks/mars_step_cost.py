"""One MARS training step of a config's recipe, padded layout against packed (issue 39, item 1): the speed-up at
identical loss.

    python benchmarks/mars_step_cost.py --config configs/smollm2-135m.yaml --model mars_b4 \\
        --init <mars import-smollm2 folder or an AR SFT model> --data <world>/data

Builds the pipeline's own trainer for the model entry (its recipe: micro-batch size, accumulation, length-sorted
micro-batches, EOS padding, loss normalisation), draws ``--steps`` optimizer steps of real micro-batches from its data
loader, and times each step's forward + backward with each layout at the same weights, interleaved (ABAB, the order
alternating per repetition) so that machine drift cancels; the optimizer's update (the same for both) is timed once
and added to both. Prints, per layout: tokens fed (the linear layers' rows), median seconds per optimizer step,
examples per second; the ratio packed / padded; and the largest relative difference of the step's loss and of the
gradient between the layouts (the tolerance: the loss test, tests/test_packing.py, pins 1e-5 on the tiny model).
``--profile`` adds torch.profiler's top operators of one packed step.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from mars.pipeline.config import load_config, train_spec
from mars.training.data import build_dataset, load_records
from mars.training.train import load_init, make_trainer

LAYOUTS = ("padded", "packed")


def step_batches(trainer, steps: int) -> list[tuple[list[dict], torch.Tensor]]:
    iterator = iter(trainer.get_train_dataloader())
    accumulation = trainer.args.gradient_accumulation_steps
    return [trainer.get_batch_samples(iterator, accumulation, torch.device("cpu")) for _ in range(steps)]


def in_layout(trainer, inputs: dict, layout: str):
    trainer.layout = layout
    return trainer.dual_stream(inputs)


def tokens_fed(trainer, micro_batches: list[dict], layout: str) -> int:
    return sum(in_layout(trainer, inputs, layout).input_ids.numel() for inputs in micro_batches)


def run_step(trainer, micro_batches: list[dict], count, layout: str) -> tuple[float, float, list[torch.Tensor]]:
    """Seconds of one step's forward + backward, its loss and gradients (the weights are not updated)."""
    trainer.layout = layout
    trainer.model.zero_grad(set_to_none=True)
    trainer._step_sequences = sum(int(b["input_ids"].shape[0]) for b in micro_batches)
    start = time.perf_counter()
    loss = sum(float(trainer.training_step(trainer.model, inputs, count)) for inputs in micro_batches)
    seconds = time.perf_counter() - start
    return seconds, loss, [p.grad for p in trainer.model.parameters() if p.grad is not None]


def matmul_floor(trainer, micro_batches: list[dict], reps: int) -> float:
    """Seconds of the plain matrix products of one packed step's linear layers, the same shapes (per micro-batch:
    [tokens, in] x [in, out] forward, and the backward's input and weight gradients; the output layer over the
    targets only): what the step would cost if it were nothing but its products (median of ``reps``)."""
    model = trainer.accelerator.unwrap_model(trainer.model)
    head = model.get_output_embeddings()
    shapes = []
    for inputs in micro_batches:
        packed = in_layout(trainer, inputs, "packed")
        rows, targets = packed.input_ids.shape[1], int((packed.targets != -100).sum())
        for module in model.modules():
            if isinstance(module, torch.nn.Linear):
                m = targets if module is head else rows
                shapes += [(m, module.in_features, module.out_features), (m, module.out_features, module.in_features)]
                shapes.append((module.out_features, m, module.in_features))  # the weight gradient
    operands = [(torch.randn(m, k), torch.randn(k, n)) for m, k, n in shapes]
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        for a, b in operands:
            torch.mm(a, b)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--model", default="mars_b4", help="a dual-stream model entry of the config")
    parser.add_argument("--init", required=True, help="the starting checkpoint folder")
    parser.add_argument("--data", required=True, help="the world's data folder (train.jsonl)")
    parser.add_argument("--steps", type=int, default=4, help="distinct optimizer steps")
    parser.add_argument("--reps", type=int, default=3, help="timed repetitions of each step per layout")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--floor", action="store_true", help="also time the plain matrix products of the same shapes")
    parser.add_argument("--json", type=Path, help="write the numbers here too")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = load_config(args.config)
    spec = train_spec(config, args.model)
    model, tokenizer = load_init(args.init, spec, mask_token=config["world"].get("mask_token"))
    dataset = build_dataset(load_records(args.data, spec.split), tokenizer, spec)
    work = Path(f"/tmp/mars_step_cost_{args.model}")
    trainer = make_trainer(spec, model, tokenizer, dataset, work)
    trainer.create_optimizer_and_scheduler(num_training_steps=100)
    trainer.current_gradient_accumulation_steps = trainer.args.gradient_accumulation_steps
    model.train()
    steps = step_batches(trainer, args.steps)
    examples = [sum(int(b["input_ids"].shape[0]) for b in micro) for micro, _ in steps]

    times = {layout: [[] for _ in steps] for layout in LAYOUTS}
    worst_loss = worst_grad = 0.0
    for rep in range(args.reps):
        for index, (micro, count) in enumerate(steps):
            results = {}
            for layout in LAYOUTS if (rep + index) % 2 == 0 else LAYOUTS[::-1]:
                seconds, loss, grads = run_step(trainer, micro, count, layout)
                times[layout][index].append(seconds)
                results[layout] = (loss, [g.clone() for g in grads] if rep == 0 else None)
            if rep == 0:
                (loss_a, grads_a), (loss_b, grads_b) = results["padded"], results["packed"]
                worst_loss = max(worst_loss, abs(loss_b - loss_a) / abs(loss_a))
                for a, b in zip(grads_a, grads_b):
                    worst_grad = max(worst_grad, float((b - a).norm() / a.norm().clamp(min=1e-30)))
    start = time.perf_counter()
    trainer.optimizer.step()
    optimizer_seconds = time.perf_counter() - start
    trainer.optimizer.zero_grad(set_to_none=True)

    rows = {}
    for layout in LAYOUTS:
        per_step = [statistics.median(t) + optimizer_seconds for t in times[layout]]
        rows[layout] = {
            "tokens_fed": sum(tokens_fed(trainer, micro, layout) for micro, _ in steps),
            "seconds_per_step": statistics.mean(per_step),
            "examples_per_second": sum(examples) / sum(per_step),
        }
    speedup = rows["packed"]["examples_per_second"] / rows["padded"]["examples_per_second"]
    print(f"{platform.processor() or platform.machine()}, {args.threads} threads, {args.model} of {args.config}")
    print(f"{args.steps} optimizer steps of {examples} examples, {args.reps} repetitions")
    print(f"the optimizer's update: {optimizer_seconds:.2f} s (added to both layouts)")
    for layout, row in rows.items():
        print(
            f"{layout:7s} tokens fed {row['tokens_fed']:7d}  {row['seconds_per_step']:6.2f} s/step"
            f"  {row['examples_per_second']:.3f} examples/s"
        )
    fed = rows["padded"]["tokens_fed"] / rows["packed"]["tokens_fed"]
    print(f"packed / padded: {speedup:.3f}x examples per second ({fed:.3f}x fewer tokens fed)")
    print(f"largest relative difference: loss {worst_loss:.2e}, gradient (norm of the difference) {worst_grad:.2e}")
    if args.floor:
        floor = statistics.mean(matmul_floor(trainer, micro, args.reps) for micro, _ in steps)
        packed = rows["packed"]["seconds_per_step"] - optimizer_seconds
        print(
            f"plain matrix products of the packed step's shapes: {floor:.2f} s"
            f" = {floor / packed:.2f} of its forward + backward"
        )
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        micro, count = steps[0]
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            run_step(trainer, micro, count, "packed")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))
    if args.json:
        args.json.write_text(
            json.dumps({"rows": rows, "speedup": speedup, "loss_rel": worst_loss, "grad_rel": worst_grad}, indent=2)
        )


if __name__ == "__main__":
    main()
