# Stage 3: benchmark evaluations through lm-evaluation-harness (`mars eval`), one job per (model, setting, task).


def eval_inputs(wildcards):
    inputs = {"data": str(WORLD / "data" / "test.jsonl")}
    if wildcards.model != "world" or TINY:
        inputs["model"] = model_path(wildcards.model)
    return inputs


rule evaluate:
    input:
        unpack(eval_inputs),
    output:
        str(RESULTS / "eval" / "{model}" / "{method}-tau{tau}-{metric}" / "{family}.json"),
    params:
        model=lambda wildcards: model_path(wildcards.model),
        data=str(WORLD / "data"),
        task=lambda wildcards: (f"tiny_{wildcards.family}" if EVAL.get("profile", "tiny") == "tiny"
                                else wildcards.family),
        block=lambda wildcards: "--block-size 4" if wildcards.method == "jacobi" else "",
        limit=lambda wildcards: f"--limit {EVAL['limit']}" if EVAL.get("limit") else "",
    wildcard_constraints:
        method="ar|mars|jacobi|block_diffusion",
        metric="probability|entropy|margin",
        family="|".join(FAMILIES),
        tau=r"[0-9.]+",
    threads: 1
    log:
        str(RESULTS / "logs" / "eval" / "{model}" / "{method}-tau{tau}-{metric}" / "{family}.log"),
    shell:
        "OMP_NUM_THREADS={threads} mars eval --model {params.model} --tasks {params.task}"
        " --profile {EVAL_PROFILE} --data {params.data} --method {wildcards.method} --tau {wildcards.tau}"
        " --metric {wildcards.metric} --cache {EVAL_CACHE} {params.block} {params.limit}"
        " --batch-size {EVAL_BATCH} --max-gen-toks {EVAL_TOKENS} --output {output}"
        " --experiment {config[name]} --results-dir {RESULTS_ROOT}"
        " --tag rule=evaluate --tag model={wildcards.model} > {log} 2>&1"

