# Stage 1: the tiny world (synthetic data, tokenizer, initial model). An hf world downloads on first use instead.


rule world:
    output:
        data=str(WORLD / "data" / "train.jsonl"),
        test=str(WORLD / "data" / "test.jsonl"),
        init=directory(str(WORLD / "init")),
    params:
        out=str(WORLD),
    log:
        str(RESULTS / "logs" / "world.log"),
    shell:
        "rm -rf {params.out} && mars world --config {CONFIGFILE} --output {params.out} > {log} 2>&1"
