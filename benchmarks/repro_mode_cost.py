"""What the reproducible kernel mode costs: training and decoding time in the mode / in the native kernels.

Declared before it was run (issue 41): the mode (``training.kernels: reproducible``, mars/repro.py) is the default
if it costs under about 10 % of the tiny default's wall time, which is training and decoding. Measured, on the tiny
default's model size (``world.model`` of config.yaml) with its training settings (batch 8 x 4 micro-batches, sorted,
``--threads``: 1 as every tiny job but the base, which trains on 2):

- ``train_lm``: ``--steps`` optimizer steps of the plain-LM base from the world's initial model;
- ``train_mars``: ``--steps`` steps of MARS B=4 from that base;
- ``decode_tau0.95`` / ``decode_tau1.0``: the MARS model decoding the world's test prompts (batch 16, at most 128
  new tokens, cursor cache, as ``mars eval`` does) at tau 0.95 and at tau 1.0 (greedy AR).

Each workload runs in its own process (the mode's variables are read when torch first runs a kernel; the process
applies the mode as ``mars train`` does), timed inside that process from just before the work to just after it
(start-up and imports excluded). The two modes alternate,
``--reps`` pairs per workload, the first of each pair alternating too; the ratio is taken pair by pair (machine
drift cancels) and its median printed.

    python benchmarks/repro_mode_cost.py --world /tmp/world --steps 30 --reps 5 [--threads 2 --workloads train_lm]

``--world`` is built first if it does not exist, as benchmarks/kernel_knobs.py builds it (config.yaml's world, 40
problems per family); the decoded model is a MARS B=4 model trained ``--steps`` steps from a ``--steps``-step base.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKLOADS = ("train_lm", "train_mars", "decode_tau0.95", "decode_tau1.0")


def child(args) -> None:
    import torch

    from mars.repro import apply_kernel_mode

    apply_kernel_mode(args.mode)  # (what `mars train` does first; decoding: the same kernels)
    torch.set_num_threads(args.threads)
    apply_kernel_mode(args.mode)
    if args.workload.startswith("train"):
        from mars.pipeline.config import TrainSpec
        from mars.training.train import train

        fields = dict(batch_size=8, grad_accum=4, sort_micro_batches=True, max_length=256, max_steps=args.steps)
        fields.update(save_steps=10_000, logging_steps=10, eval_steps=None, threads=args.threads, seed=0)
        fields.update(kernels=args.mode)
        if args.workload == "train_lm":
            spec = TrainSpec(method="lm", init="world", split="pretrain", learning_rate=3e-3, **fields)
        else:
            spec = TrainSpec(method="mars", init="base", block_size=4, learning_rate=1e-3, **fields)
        started = time.perf_counter()
        train(
            spec, init=args.init, data_dir=args.data, output=args.output, experiment="repro-cost", results_dir=args.tmp
        )
        seconds = time.perf_counter() - started
    else:
        from mars.decoding.generation import generate_text, load_model
        from mars.training.data import load_records

        model, tokenizer = load_model(args.init, device="cpu")
        prompts = [r["prompt"] for r in load_records(args.data, "test")][: args.prompts]
        tau = float(args.workload.removeprefix("decode_tau"))
        started = time.perf_counter()
        outs = generate_text(model, tokenizer, prompts, batch_size=16, tau=tau, max_new_tokens=128, cache="cursor")
        seconds = time.perf_counter() - started
        Path(args.output).write_text(json.dumps([o.text for o in outs]))
    print(json.dumps({"seconds": seconds, "capability": torch.backends.cpu.get_cpu_capability()}))


def run(workload: str, mode: str, init: Path, data: Path, out: Path, args, tmp: Path) -> dict:
    from mars.repro import KERNEL_VARIABLES, reproducible_env

    env = {k: v for k, v in os.environ.items() if k not in KERNEL_VARIABLES}
    env.update(reproducible_env(mode))
    env["MLFLOW_TRACKING_URI"] = f"sqlite:///{tmp / 'mlflow.db'}"
    command = [sys.executable, __file__, "--child", "--workload", workload, "--init", str(init), "--data", str(data)]
    command += ["--output", str(out), "--steps", str(args.steps), "--threads", str(args.threads), "--tmp", str(tmp)]
    command += ["--prompts", str(args.prompts), "--mode", mode]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{workload} ({mode}) failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world", type=Path, help="a tiny world folder (init/, data/)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--prompts", type=int, default=32, help="test prompts decoded per decoding run")
    parser.add_argument("--workloads", nargs="*", default=list(WORKLOADS))
    parser.add_argument("--output", type=Path, help="JSON of every timing")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--workload", help=argparse.SUPPRESS)
    parser.add_argument("--init", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--tmp", help=argparse.SUPPRESS)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    from kernel_knobs import ensure_world  # (benchmarks/, this script's folder)

    tmp = Path(tempfile.mkdtemp(prefix="repro-cost-"))
    data = ensure_world(args.world) / "data"
    # the starts: a base and a MARS model trained once (native kernels); every timed run reads them
    base, mars_model = tmp / "start_base", tmp / "start_mars"
    run("train_lm", "native", args.world / "init", data, base, args, tmp)
    run("train_mars", "native", base, data, mars_model, args, tmp)
    inits = {"train_lm": args.world / "init", "train_mars": base}
    rows = []
    for workload in args.workloads:
        for rep in range(args.reps):
            order = ("native", "reproducible") if rep % 2 == 0 else ("reproducible", "native")
            pair = {}
            for mode in order:
                out = tmp / f"{workload}_{mode}_{rep}"
                pair[mode] = run(workload, mode, inits.get(workload, mars_model), data, out, args, tmp)
            row = {"workload": workload, "rep": rep, **{m: pair[m]["seconds"] for m in pair}}
            row["ratio"] = row["reproducible"] / row["native"]
            row["capabilities"] = {m: pair[m]["capability"] for m in pair}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.output:
        args.output.write_text(json.dumps(rows, indent=2) + "\n")
    print("\n| workload | native s (median) | reproducible s (median) | reproducible / native (median of pairs) |")
    print("|---|---|---|---|")
    for workload in args.workloads:
        mine = [r for r in rows if r["workload"] == workload]
        native = statistics.median(r["native"] for r in mine)
        repro = statistics.median(r["reproducible"] for r in mine)
        ratio = statistics.median(r["ratio"] for r in mine)
        print(f"| {workload} | {native:.2f} | {repro:.2f} | {ratio:.3f} |")


if __name__ == "__main__":
    main()
