# Stage 2: every model entry of the config is one training job (base -> AR SFT -> MARS and the ablations).


def train_cores(model):
    """The cores of a train job: torch threads per process (params.threads) x its CPU processes (the rehearsal's
    training.processes)."""
    spec = train_spec(config, model)
    return (spec.threads or 1) * (spec.processes or 1)


rule train:
    input:
        unpack(init_input),
    output:
        directory(str(RESULTS / "models" / "{model}")),
    params:
        job=lambda wildcards: J.as_param(J.train_job(config, wildcards.model)),
        init=lambda wildcards: init_path(wildcards.model),
        data=lambda wildcards: train_data_dir(wildcards.model),
        threads=lambda wildcards: train_spec(config, wildcards.model).threads or 1,
    wildcard_constraints:
        model="|".join(config["models"]),
    # how the job is launched (mars/launch.py): resources, not params, so that a different GPU count or accelerate
    # config never reruns a finished model (the effective batch is the config's whatever the processes)
    resources:
        processes=lambda wildcards: train_spec(config, wildcards.model).processes or 0,
        accelerate_config=lambda wildcards: train_spec(config, wildcards.model).accelerate_config or "none",
    threads: lambda wildcards: train_cores(wildcards.model)
    conda:
        "../../envs/train.yaml"
    log:
        str(RESULTS / "logs" / "train_{model}.log"),
    benchmark:
        str(BENCHMARKS / "train" / "{model}.tsv")
    shell:
        "{OFFLINE_ENV}OMP_NUM_THREADS={params.threads} $(python -m mars.launch {resources.processes}"
        " {resources.accelerate_config}) train --job {params.job:q} --init {params.init} --data {params.data}"
        " --output {output} --results-dir {RESULTS_ROOT} --tag rule=train > {log} 2>&1"


rule distill:
    """Self-distilled targets (an entry's targets: self_greedy): its init model's own greedy answers to the split's
    prompts, in place of the gold answers (mars distill; the held-out references are copied unchanged)."""
    input:
        model=lambda wildcards: model_path(wildcards.init),
        data=lambda wildcards: str(WORLD / "data" / f"{wildcards.split}.jsonl"),
    output:
        directory(str(RESULTS / "distilled" / "{init}" / "{split}")),
    params:
        # the decoding budget is the evaluations' (a gold answer is far shorter); batch 32 (throughput only)
        job=lambda wildcards: J.as_param(
            {"split": wildcards.split, "batch_size": 32, "max_new_tokens": config["eval"]["max_gen_toks"],
             "threads": config["training"]["threads"] or 1}
        ),
        data=str(WORLD / "data"),
    wildcard_constraints:
        init="|".join([*config["models"], "world"]),
        split=r"train(_x\d+)?",
    threads: config["training"]["threads"] or 1
    conda:
        "../../envs/train.yaml"
    log:
        str(RESULTS / "logs" / "distill_{init}_{split}.log"),
    benchmark:
        str(BENCHMARKS / "distill" / "{init}_{split}.tsv")
    shell:
        "{OFFLINE_ENV}OMP_NUM_THREADS={threads} mars distill --job {params.job:q} --model {input.model}"
        " --data {params.data} --output {output} > {log} 2>&1"
