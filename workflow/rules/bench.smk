# Stage 4: wall-clock benchmark (Table 5) on the GSM8K-like prompts.


def bench_inputs(wildcards):
    """The model and its prompts: the tiny world's test split, or (hf world) the GSM8K test split of the local
    harness mirror (eval.harness_data; none: the hub, no file)."""
    inputs = {"model": model_path(config["bench"]["model"]), "prefetched": PREFETCHED}
    if TINY:
        inputs["data"] = str(WORLD / "data" / "test.jsonl")
    elif config["eval"]["harness_data"]:
        inputs["data"] = X.bench_prompt_file(config)
    return inputs


rule bench:
    input:
        unpack(bench_inputs),
    output:
        csv=str(RESULTS / "bench" / "bench.csv"),
        json=str(RESULTS / "bench" / "bench.json"),
    params:
        job=J.as_param(J.bench_job(config)),
        out=str(RESULTS / "bench"),
        data=str(WORLD / "data"),
    threads: config["bench"]["threads"]  # fixed (not --cores) so a SLURM job measures the same thing
    conda:
        "../../envs/eval.yaml"
    log:
        str(RESULTS / "logs" / "bench.log"),
    benchmark:
        str(BENCHMARKS / "bench.tsv")
    shell:
        "{OFFLINE_ENV}mars bench --job {params.job:q} --model {input.model} --data {params.data} --output {params.out}"
        " --results-dir {RESULTS_ROOT} > {log} 2>&1"
