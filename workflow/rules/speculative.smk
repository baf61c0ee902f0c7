# Stage 4b: speculative decoding (Table 6, config section `speculative`): AR / MARS drafts (smaller models of the same
# tokenizer) with AR / MARS targets, and MARS's lossless self-speculative decoding, batch 1, on the GSM8K-like prompts.

SPEC_MODELS = X.speculative_models(config)

if SPEC_MODELS:

    def speculate_inputs(wildcards):
        """The four checkpoints and the prompts (as the benchmark's: bench_inputs in bench.smk)."""
        inputs = {role: model_path(m) for role, m in SPEC_MODELS.items()}
        inputs["prefetched"] = PREFETCHED
        if TINY:
            inputs["data"] = str(WORLD / "data" / "test.jsonl")
        elif config["eval"]["harness_data"]:
            inputs["data"] = X.bench_prompt_file(config)
        return inputs

    rule speculate:
        input:
            unpack(speculate_inputs),
        output:
            csv=str(RESULTS / "speculative" / "spec.csv"),
            json=str(RESULTS / "speculative" / "spec.json"),
        params:
            job=J.as_param(J.speculate_job(config)),
            out=str(RESULTS / "speculative"),
            data=str(WORLD / "data"),
        threads: config["speculative"]["threads"]  # fixed (not --cores) so a SLURM job measures the same thing
        conda:
            "../../envs/eval.yaml"
        log:
            str(RESULTS / "logs" / "speculate.log"),
        benchmark:
            str(BENCHMARKS / "speculate.tsv")
        shell:
            "{OFFLINE_ENV}mars speculate --job {params.job:q} --target-ar {input.target_ar}"
            " --target-mars {input.target_mars} --draft-ar {input.draft_ar} --draft-mars {input.draft_mars}"
            " --data {params.data} --output {params.out} --results-dir {RESULTS_ROOT} > {log} 2>&1"
