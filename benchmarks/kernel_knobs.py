"""Which CPU kernel choices change a short training's weights (issue 41)?

Two machines of the same kind trained different tiny-world models from the same commit, config and seed. Without a
second machine, this script forces on one machine the choices that torch, MKL and oneDNN otherwise make per CPU:

- ``ATEN_CPU_CAPABILITY`` (default / avx2 / avx512): the vector width of ATen's own kernels (softmax, norms, sums);
- ``MKL_CBWR`` (AUTO / COMPATIBLE / AVX2 / AVX512, optionally ``,STRICT``): MKL's code path for its BLAS (the fp32
  matrix products of every linear layer);
- ``ONEDNN_MAX_CPU_ISA`` (AVX2 / AVX512_CORE): the highest ISA oneDNN may use;
- the intra-op thread count (``training.threads`` 1 vs 2) and ``torch.use_deterministic_algorithms``.

Measured: for each case, a few dozen optimizer steps of the tiny base (``method: lm`` from the world's initial
model) and of MARS B=4 (from the reference case's base), each in its own process (the variables are read when torch
first runs a kernel), and the largest absolute difference of any weight from the reference case's weights (``0``:
bit-identical); a case ``<case>+threads=2`` is compared with ``<case>`` instead. A case ``repro/<case>`` forces the
same variables and threads, then trains with ``training.kernels: reproducible`` (mars/repro.py), whose own
variables win; it is compared with ``repro/reference`` (its MARS runs start from that case's base).

    python benchmarks/kernel_knobs.py --world /tmp/world --steps 30 --output /tmp/knobs.json

Each row also carries the sha256 of its trained weights, and the output the sha256 of the world's initial model
and data: two machines that run the same cases compare their bits through these files
(``--cases reference repro/reference`` is the short run; docs/kernel_fingerprints/ keeps one file per machine, and
``--compare docs/kernel_fingerprints/*.json`` prints, for each case both ran from the same world, whether the bits
are the same).

``--world`` is built first if it does not exist: config.yaml's world (the default's model, tokenizer size and
generators) with 40 problems per family in the SFT and pre-training sets (``SMALL_WORLD``), as measured for the
README; any tiny world folder can be given instead.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# name -> (environment variables, training.threads, use_deterministic_algorithms, reproducible mode)
CASES = {
    "reference": ({}, 1, False, False),
    "threads=2": ({}, 2, False, False),
    "deterministic": ({}, 1, True, False),
    "ATEN_CPU_CAPABILITY=avx2": ({"ATEN_CPU_CAPABILITY": "avx2"}, 1, False, False),
    "ATEN_CPU_CAPABILITY=default": ({"ATEN_CPU_CAPABILITY": "default"}, 1, False, False),
    "MKL_CBWR=COMPATIBLE": ({"MKL_CBWR": "COMPATIBLE"}, 1, False, False),
    "MKL_CBWR=AVX2": ({"MKL_CBWR": "AVX2"}, 1, False, False),
    "MKL_CBWR=AVX512": ({"MKL_CBWR": "AVX512"}, 1, False, False),
    "MKL_ENABLE_INSTRUCTIONS=AVX2": ({"MKL_ENABLE_INSTRUCTIONS": "AVX2"}, 1, False, False),
    "ONEDNN_MAX_CPU_ISA=AVX2": ({"ONEDNN_MAX_CPU_ISA": "AVX2"}, 1, False, False),
    "ONEDNN_MAX_CPU_ISA=AVX512_CORE": ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}, 1, False, False),
    "MKL_CBWR=COMPATIBLE,STRICT": ({"MKL_CBWR": "COMPATIBLE,STRICT"}, 1, False, False),
}
# "<case>+threads=2": that case's variables with two threads, compared with that case (run in the same call)
for _name in ("ATEN_CPU_CAPABILITY=avx2", "MKL_CBWR=COMPATIBLE", "MKL_CBWR=COMPATIBLE,STRICT"):
    CASES[f"{_name}+threads=2"] = (CASES[_name][0], 2, False, False)


# config.yaml's world, smaller sets: the model and its shapes are the default's, the data builds in seconds
SMALL_WORLD = {"train_per_family": 40, "pretrain_per_family": 40, "heldout_per_family": 0, "test_per_family": 4}
SMALL_WORLD["sft_scales"] = []


def ensure_world(folder: Path) -> Path:
    """``folder`` as a tiny world: built from config.yaml's world with :data:`SMALL_WORLD` if it does not exist."""
    if not folder.exists():
        from mars.pipeline.config import load_config
        from mars.world.build import build_world

        world = load_config(Path(__file__).resolve().parents[1] / "config.yaml")["world"]
        build_world({**world, **SMALL_WORLD}, folder)
    return folder


def child(args) -> None:
    """One training run in this process: the environment was set by the parent before torch loaded."""
    import torch

    from mars.pipeline.config import TrainSpec
    from mars.training.train import train

    if args.deterministic:
        torch.use_deterministic_algorithms(True)
    fields = dict(
        batch_size=8,
        grad_accum=4,
        sort_micro_batches=True,
        max_length=256,
        max_steps=args.steps,
        save_steps=10_000,
        logging_steps=10,
        eval_steps=None,
        warmup_ratio=0.03,
        threads=args.threads,
        kernels="reproducible" if args.repro else "native",
        seed=0,
    )
    if args.method == "lm":
        spec = TrainSpec(method="lm", init="world", split="pretrain", learning_rate=3e-3, **fields)
    else:
        spec = TrainSpec(method="mars", init="base", block_size=4, w_ar=1.0, learning_rate=1e-3, **fields)
    started = time.perf_counter()
    train(spec, init=args.init, data_dir=args.data, output=args.output, experiment="kernel-knobs", results_dir=args.tmp)
    print(
        json.dumps(
            {
                "capability": torch.backends.cpu.get_cpu_capability(),
                "threads": torch.get_num_threads(),
                "seconds": time.perf_counter() - started,
            }
        )
    )


def run_case(name: str, method: str, init: Path, data: Path, out: Path, steps: int, tmp: Path, repro: bool) -> dict:
    env_vars, threads, deterministic, _ = CASES[name.removeprefix("repro/")]
    env = {k: v for k, v in os.environ.items() if k not in {"MKL_CBWR", "ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY"}}
    env.update(env_vars)
    if repro:  # the mode's own variables win over a forced one, as they do in `mars train`
        from mars.repro import reproducible_env

        env.update(reproducible_env())
    env["MLFLOW_TRACKING_URI"] = f"sqlite:///{tmp / 'mlflow.db'}"
    command = [sys.executable, __file__, "--child", "--method", method, "--init", str(init), "--data", str(data)]
    command += ["--output", str(out), "--steps", str(steps), "--threads", str(threads), "--tmp", str(tmp)]
    if deterministic:
        command.append("--deterministic")
    if repro:
        command.append("--repro")
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{name} ({method}) failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def max_difference(a: Path, b: Path) -> float:
    from safetensors.torch import load_file

    x, y = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    return max((x[k].double() - y[k].double()).abs().max().item() for k in x)


def sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def world_digest(world: Path) -> dict[str, str]:
    """The sha256 of the world's initial weights and data files: the start two machines' fingerprints share."""
    files = sorted((world / "init").glob("*.safetensors")) + sorted((world / "data").glob("*.jsonl"))
    return {p.relative_to(world).as_posix(): sha256(p) for p in files}


def compare(record: dict, others: list[Path]) -> list[str]:
    """One line per other machine's fingerprint file and case: same bits or not (the worlds must match)."""
    lines = []
    for path in others:
        other = json.loads(path.read_text())
        who = f"{path.name} ({other['machine'].get('cpu_id')}, {other['machine'].get('cpu_isas')})"
        if other["world"] != record["world"] or other["steps"] != record["steps"]:
            lines.append(f"{who}: another world or step count, not comparable")
            continue
        theirs = {(r["case"], r["method"]): r["sha256"] for r in other["rows"]}
        for r in record["rows"]:
            if (r["case"], r["method"]) in theirs:
                same = "same bits" if theirs[(r["case"], r["method"])] == r["sha256"] else "DIFFERENT bits"
                lines.append(f"{who}: {r['case']} {r['method']}: {same}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world", type=Path, help="a tiny world folder (init/, data/)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--cases", nargs="*", default=list(CASES), help="cases; repro/<case> in the mode")
    parser.add_argument("--output", type=Path, help="JSON of every case's differences")
    parser.add_argument("--compare", type=Path, nargs="*", default=[], help="other machines' --output files")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--method", help=argparse.SUPPRESS)
    parser.add_argument("--init", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--deterministic", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--repro", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tmp", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.output = str(args.output)
        return child(args)
    tmp = Path(tempfile.mkdtemp(prefix="kernel-knobs-"))
    data, rows = ensure_world(args.world) / "data", []
    references, outputs = {}, {}
    for mode in ("plain", "repro"):
        names = [c for c in args.cases if c.startswith("repro/") == (mode == "repro")]
        if not names:
            continue
        ref_name = "reference" if mode == "plain" else "repro/reference"
        names = [ref_name] + [n for n in names if n != ref_name]
        for method in ("lm", "mars"):
            for name in names:
                out = tmp / f"{name.replace('/', '_').replace('=', '_')}_{method}"
                # every MARS run starts from its mode's reference base: one start, so only the knob differs
                init = args.world / "init" if method == "lm" else references[(mode, "lm")]
                facts = run_case(name, method, init, data, out, args.steps, tmp, mode == "repro")
                outputs[(name, method)] = out
                against = name.removesuffix("+threads=2") if name.endswith("+threads=2") else ref_name
                against = against if (against, method) in outputs else ref_name
                ref = out if name == ref_name else outputs[(against, method)]
                references.setdefault((mode, method), out)
                row = {"case": name, "method": method, "against": against, "max_abs_diff": max_difference(ref, out)}
                row["sha256"] = sha256(out / "model.safetensors")
                row.update(facts)
                rows.append(row)
                print(json.dumps(row), flush=True)
    from mars.repro import machine_facts

    record = {"machine": machine_facts(), "steps": args.steps, "world": world_digest(args.world), "rows": rows}
    if args.output:
        args.output.write_text(json.dumps(record, indent=2) + "\n")
    print("\n| case | method | capability | threads | compared with | max abs weight difference |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        cells = (r["case"], r["method"], r["capability"], r["threads"], r["against"], f"{r['max_abs_diff']:.3g}")
        print("| " + " | ".join(map(str, cells)) + " |")
    for line in compare(record, [p for p in args.compare if p.resolve() != (args.output or Path()).resolve()]):
        print(line)


if __name__ == "__main__":
    main()
