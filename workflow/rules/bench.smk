# Stage 4: wall-clock benchmark (Table 5) on the GSM8K-like prompts.


rule bench:
    input:
        model=model_path(BENCH.get("model", "mars_b4")),
        data=str(WORLD / "data" / ("test.jsonl" if TINY else "train.jsonl")),
    output:
        csv=str(RESULTS / "bench" / "bench.csv"),
        json=str(RESULTS / "bench" / "bench.json"),
    params:
        out=str(RESULTS / "bench"),
        data=str(WORLD / "data"),
        batch_sizes=",".join(str(b) for b in BENCH.get("batch_sizes", [1, 4, 8, 16])),
        cache_blocks=",".join(str(c) for c in BENCH.get("cache_block_sizes", [4, 8, 16, 32, 64])),
        num_prompts=BENCH.get("num_prompts", 32),
        reps=BENCH.get("reps", 3),
        tokens=BENCH.get("max_new_tokens", 128),
        tau=BENCH.get("tau", 0.95),
    threads: BENCH.get("threads", 2)  # fixed (not --cores) so a SLURM job measures the same thing
    conda:
        "../../envs/eval.yaml"
    log:
        str(RESULTS / "logs" / "bench.log"),
    shell:
        "mars bench --model {input.model} --data {params.data} --output {params.out}"
        " --batch-sizes {params.batch_sizes} --cache-block-sizes {params.cache_blocks}"
        " --num-prompts {params.num_prompts} --reps {params.reps} --max-new-tokens {params.tokens}"
        " --tau {params.tau} --threads {threads} > {log} 2>&1"
