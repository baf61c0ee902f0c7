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
        job=lambda wildcards: X.as_param(X.train_job(config, wildcards.model)),
        init=lambda wildcards: init_path(wildcards.model),
        data=str(WORLD / "data"),
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
