"""Why a window forward costs more than a one-token forward on this CPU, and what oneDNN-packed weights change.

    python benchmarks/cpu_linear_cost.py --model CKPT [--context 200] [--reps 10]

Declared before the first run: if the window's extra cost is the matrix-product kernel, then (1) for the model's
own linear shapes, 4 rows cost about 2x or more what 1 row costs with PyTorch's default ``F.linear`` and about the
same with oneDNN-packed weights (:mod:`mars.decoding.cpu_linear`), and (2) with every linear packed, the cached
forward of a 4-token window costs at most 1.2x a one-token forward at batch 1 (1.8x with the default kernel).

Prints (1) microseconds per product for each distinct linear shape of the model at 1, 2, 4, 8 and 16 rows, both
kernels (median of 200 calls), with the per-forward sum over the model's layers; (2) milliseconds of a cached
forward after ``--context`` tokens, one token vs a window of 4 per row, at batch 1, 4 and 16, both kernels (median of
``--reps`` interleaved repetitions), and the window/token ratio that bounds a multi-token decoder's speed-up.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

from mars.decoding.cpu_linear import PackedLinear, pack_linears
from mars.decoding.generation import load_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
from smollm2_costs import forward_costs  # noqa: E402


def microseconds(fn, calls: int = 200) -> float:
    for _ in range(10):
        fn()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--context", type=int, default=200)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, _ = load_model(args.model, dtype="float32", device="cpu")
    shapes = collections.Counter((m.out_features, m.in_features) for m in model.modules() if isinstance(m, nn.Linear))
    rows = (1, 2, 4, 8, 16)
    print(f"(1) one linear product, microseconds (median of 200), {args.threads} threads")
    totals = {kernel: dict.fromkeys(rows, 0.0) for kernel in ("default", "packed")}
    for (out_features, in_features), count in shapes.items():
        linear = nn.Linear(in_features, out_features, bias=False)
        packed = PackedLinear(linear)
        line = []
        with torch.inference_mode():
            for n in rows:
                x = torch.randn(n, in_features)
                d, p = microseconds(lambda: linear(x)), microseconds(lambda: packed(x))
                totals["default"][n] += count * d
                totals["packed"][n] += count * p
                line.append(f"{n}: {d:6.0f} / {p:6.0f}")
        print(f"  {out_features:>6}x{in_features:<5} x{count:<3} rows: default / packed  " + "  ".join(line))
    for kernel, by_rows in totals.items():
        cells = "  ".join(f"{n} rows {t / 1e3:6.1f} ms ({t / by_rows[1]:.2f}x)" for n, t in by_rows.items())
        print(f"  all linears of one forward, {kernel:7s}: {cells}")

    print(f"(2) cached forward after {args.context} tokens, ms (median of {args.reps}): 1 token vs a 4-token window")
    for kernel in ("default", "packed"):
        if kernel == "packed":
            print(f"  ({pack_linears(model)} linears packed)")
        for batch in (1, 4, 16):
            one, window = (t * 1e3 for t in forward_costs(model, args.context, batch, args.reps))
            print(f"  {kernel:7s} batch {batch:2d}: {one:7.1f} vs {window:7.1f} ms, window/token {window / one:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
