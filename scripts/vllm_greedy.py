"""Greedy decoding of token-id prompts with vLLM, in vLLM's own environment (scripts/setup_vllm.sh):

    .venv-vllm/bin/python scripts/vllm_greedy.py CKPT PROMPTS.json OUT.json [--max-tokens 32]
        [--parallel-drafting K [--draft DRAFT] | --ngram K]

PROMPTS.json holds a list of token-id lists (so no chat template or tokenizer difference can enter). OUT.json gets
one list of generated token ids per prompt, the engine's start time and, with drafting, vLLM's own counters and
mean acceptance length. With --parallel-drafting K a MARS checkpoint is the parallel drafter (vLLM's
``draft_model`` method, ``parallel_drafting``; the mask id from the draft's config.json): the checkpoint itself, or
the smaller MARS model ``--draft`` (Table 6's pairing; same tokenizer); with --ngram K vLLM's n-gram proposer (prompt
lookup, n-grams of 2 to 4 tokens) drafts K tokens.
"""

import argparse
import json
import os
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("prompts")
    parser.add_argument("output")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--parallel-drafting", type=int, default=0)
    parser.add_argument("--ngram", type=int, default=0)
    parser.add_argument("--draft", help="the parallel drafter's checkpoint (default: CKPT itself)")
    args = parser.parse_args()
    if args.parallel_drafting and args.ngram:
        parser.error("--parallel-drafting and --ngram are two proposers: choose one")
    if args.draft and not args.parallel_drafting:
        parser.error("--draft is the parallel drafter: give --parallel-drafting K too")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    spec = None
    if args.parallel_drafting:
        spec = {
            "method": "draft_model",
            "model": args.draft or args.model,
            "num_speculative_tokens": args.parallel_drafting,
            "parallel_drafting": True,
        }
    elif args.ngram:
        spec = {"method": "ngram", "num_speculative_tokens": args.ngram, "prompt_lookup_min": 2, "prompt_lookup_max": 4}
    prompt_ids = json.load(open(args.prompts))
    start = time.time()
    llm = LLM(
        model=args.model,
        max_model_len=max(map(len, prompt_ids)) + args.max_tokens + args.parallel_drafting + args.ngram,
        enforce_eager=True,
        dtype="float32",
        speculative_config=spec,
        disable_log_stats=False,  # (the speculative counters below)
    )
    loaded = time.time() - start
    prompts = [TokensPrompt(prompt_token_ids=p) for p in prompt_ids]
    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=args.max_tokens))
    result = {"tokens": [list(o.outputs[0].token_ids) for o in outs], "engine_start_s": loaded}
    # vLLM's own speculative-decoding counters: drafts, draft tokens, accepted tokens
    for metric in llm.get_metrics():
        if metric.name.startswith("vllm:spec_decode_num_") and hasattr(metric, "value"):
            result[metric.name.removeprefix("vllm:")] = metric.value
    if result.get("spec_decode_num_drafts"):
        # mean acceptance length as vLLM reports it: tokens per target forward = 1 + accepted drafts per draft
        result["acceptance_length"] = 1 + result["spec_decode_num_accepted_tokens"] / result["spec_decode_num_drafts"]
    with open(args.output, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
