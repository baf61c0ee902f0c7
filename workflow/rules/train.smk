# Stage 2: every model entry of the config is one training job (base -> AR SFT -> MARS and the ablations).


rule train:
    input:
        unpack(init_input),
    output:
        directory(str(RESULTS / "models" / "{model}")),
    params:
        init=lambda wildcards: init_path(wildcards.model),
        data=str(WORLD / "data"),
    wildcard_constraints:
        model="|".join(config["models"]),
    threads: lambda wildcards: config["models"][wildcards.model].get("threads", config["training"].get("threads", 1)) or 1
    conda:
        "../../envs/train.yaml"
    log:
        str(RESULTS / "logs" / "train_{model}.log"),
    shell:
        "OMP_NUM_THREADS={threads} mars train --config {CONFIGFILE} --model {wildcards.model} --init {params.init}"
        " --data {params.data} --output {output} --tag rule=train --tag model={wildcards.model} > {log} 2>&1"
