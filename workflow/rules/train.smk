# Stage 2: every model entry of the config is one training job (base -> AR SFT -> MARS and the ablations).


rule train:
    input:
        unpack(init_input),
    output:
        directory(str(RESULTS / "models" / "{model}")),
    params:
        job=lambda wildcards: X.as_param(X.train_job(config, wildcards.model)),
        init=lambda wildcards: init_path(wildcards.model),
        data=str(WORLD / "data"),
        # training.processes, else one process per GPU of the job (its resource `gpu`, e.g. slurm/config.yaml's
        # MARS_SLURM_TRAIN_GPUS)
        mars=lambda wildcards, resources: X.train_launcher(
            resources.get("gpu", 0),
            train_spec(config, wildcards.model).accelerate_config,
            workflow.basedir,
            train_spec(config, wildcards.model).processes,
        ),
    wildcard_constraints:
        model="|".join(config["models"]),
    threads: lambda wildcards: train_spec(config, wildcards.model).threads or 1
    conda:
        "../../envs/train.yaml"
    log:
        str(RESULTS / "logs" / "train_{model}.log"),
    benchmark:
        str(BENCHMARKS / "train" / "{model}.tsv")
    shell:
        "{OFFLINE_ENV}OMP_NUM_THREADS={threads} {params.mars} train --job {params.job:q} --init {params.init} --data {params.data}"
        " --output {output} --results-dir {RESULTS_ROOT} --tag rule=train > {log} 2>&1"
