# Stage 3: benchmark evaluations through lm-evaluation-harness (`mars eval`).
# One job per (model, decoding setting) evaluates a set of tasks in one process (the harness and model load once):
#   eval/<model>/<setting>/<family>.json    all six families (Tables 2, 3, 4, 9, ablations)
#   sweep/<model>/<setting>/<family>.json   GSM8K- and HumanEval-like only (tau sweep: Table 8, Figures 3 and 6)
# <setting> = <method>-tau<tau>-<metric>.


def eval_inputs(wildcards):
    """The checkpoint (a hub id is not a file) and, for the tiny profile, the local test split."""
    inputs = {}
    if TINY:
        inputs["data"] = str(WORLD / "data" / "test.jsonl")
    if wildcards.model != "world" or TINY:
        inputs["model"] = model_path(wildcards.model)
    return inputs


def eval_command(families):
    tasks = ",".join(TASK_NAMES[f] for f in families)
    return (
        "OMP_NUM_THREADS={threads} mars eval --model {params.model} --tasks " + tasks +
        " --profile {EVAL_PROFILE} --data {params.data} --method {wildcards.method} --tau {wildcards.tau}"
        " --metric {wildcards.metric} --cache {EVAL_CACHE} {params.block} {params.limit}"
        " --batch-size {EVAL_BATCH} --max-gen-toks {EVAL_TOKENS} --output {params.out}/{{family}}.json"
        " --experiment {config[name]} --results-dir {RESULTS_ROOT}"
        " --tag rule={rule} --tag model={wildcards.model} > {log} 2>&1"
    )


EVAL_PARAMS = dict(
    model=lambda wildcards: model_path(wildcards.model),
    data=str(WORLD / "data"),
    block=lambda wildcards: "--block-size 4" if wildcards.method == "jacobi" else "",
    limit=f"--limit {EVAL['limit']}" if EVAL.get("limit") else "",
)
SETTING = "{method}-tau{tau}-{metric}"


rule evaluate:
    input:
        unpack(eval_inputs),
    output:
        [str(RESULTS / "eval" / "{model}" / SETTING / f"{family}.json") for family in FAMILIES],
    params:
        out=lambda wildcards, output: str(Path(output[0]).parent),
        **EVAL_PARAMS,
    wildcard_constraints:
        method="ar|mars|jacobi|block_diffusion",
        metric="probability|entropy|margin",
        tau=r"[0-9.]+",
    threads: 1
    conda:
        "../../envs/eval.yaml"
    log:
        str(RESULTS / "logs" / "eval" / "{model}" / (SETTING + ".log")),
    shell:
        eval_command(FAMILIES)


rule evaluate_sweep:
    input:
        unpack(eval_inputs),
    output:
        [str(RESULTS / "sweep" / "{model}" / SETTING / f"{family}.json") for family in SWEEP_FAMILIES],
    params:
        out=lambda wildcards, output: str(Path(output[0]).parent),
        **EVAL_PARAMS,
    wildcard_constraints:
        method="mars",
        metric="probability|entropy|margin",
        tau=r"[0-9.]+",
    threads: 1
    conda:
        "../../envs/eval.yaml"
    log:
        str(RESULTS / "logs" / "sweep" / "{model}" / (SETTING + ".log")),
    shell:
        eval_command(SWEEP_FAMILIES)
