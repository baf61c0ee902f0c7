# Stage 5: tables (CSV + Markdown + LaTeX) and figures (PNG + PDF), each from one script over pipeline outputs.

MARS_B = present("mars_b4", "mars_b8", "mars_b16")
NOLAR_B = present("mars_nolar_b4", "mars_nolar_b8", "mars_nolar_b16")
TABLE2_MODELS = present(BASE, "ar_sft_5ep", "ar_sft_10ep", "block_diffusion_b4", "mars_nolar_b4", "mars_b4")
ABLATION_MODELS = present("mars_nolar_b4", "mars_nolar_b8", "mars_nolar_b16", "mars_bidir_b4",
                          "block_diffusion_b4", "ar_sft_10ep", "mars_b4", "mars_b8", "mars_b16", "ar_sft_5ep")
SWEEP_MODELS = present(*EVAL.get("sweep_models", MARS_B + NOLAR_B))
FIG1 = EVAL.get("figure1", {"model": "mars_b4", "family": "gsm8k", "tau": 0.95})
METRIC_MODEL = EVAL.get("metric_model", "mars_b4")
METRIC_TAUS = EVAL.get("metric_taus", [0.95, 0.9, 0.8, 0.7, 0.5])

TABLE_INPUTS = {
    "table2": evals_at(TABLE2_MODELS, 1.0),
    "table3": evals_at(MARS_B + NOLAR_B, 1.0),
    "table4": evals_at(MARS_B, 1.0) + evals_at(MARS_B, 0.95),
    "table8": [eval_file(m, "mars", t, "probability", f, "sweep") for m in SWEEP_MODELS for t in SWEEP_TAUS
               for f in SWEEP_FAMILIES],
    "table9": evals_at(present("mars_b4"), 0.95)
    + [eval_file("ar_sft_5ep", "jacobi", 1.0, "probability", f) for f in FAMILIES if "ar_sft_5ep" in config["models"]],
    "ablations": evals_at(ABLATION_MODELS, 1.0)
    + evals_at([m for m in ABLATION_MODELS if decode_method(m) != "ar"], 0.95),
}
FIG6_INPUTS = [eval_file(METRIC_MODEL, "mars", t, m, f, "sweep") for m in ("probability", "entropy", "margin")
               for t in METRIC_TAUS for f in SWEEP_FAMILIES]
FIG1_INPUT = eval_file(FIG1["model"], "mars", FIG1["tau"], "probability", FIG1["family"])


def table_models(name):
    return sorted({Path(p).parent.parent.name for p in TABLE_INPUTS.get(name, [])} - {"world"})


rule table:
    input:
        evals=lambda wildcards: TABLE_INPUTS[wildcards.table],
        models=lambda wildcards: [model_dir(m) for m in table_models(wildcards.table)],
    output:
        csv=report(str(TABLES / "{table}.csv"), caption="../report/table.rst", category="Tables"),
        md=str(TABLES / "{table}.md"),
        tex=str(TABLES / "{table}.tex"),
    wildcard_constraints:
        table="|".join(TABLE_INPUTS),
    conda:
        "../../envs/report.yaml"
    log:
        str(RESULTS / "logs" / "{table}.log"),
    shell:
        "mars report table --name {wildcards.table} --config {CONFIGFILE} --results {RESULTS}"
        " --inputs {input.evals} --output {output.csv} > {log} 2>&1"


rule table5:
    input:
        bench=rules.bench.output.csv,
    output:
        csv=report(str(TABLES / "table5.csv"), caption="../report/table5.rst", category="Tables"),
        md=str(TABLES / "table5.md"),
        tex=str(TABLES / "table5.tex"),
    conda:
        "../../envs/report.yaml"
    log:
        str(RESULTS / "logs" / "table5.log"),
    shell:
        "mars report table --name table5 --config {CONFIGFILE} --results {RESULTS} --bench {input.bench}"
        " --output {output.csv} > {log} 2>&1"


rule figure1:
    input:
        eval=FIG1_INPUT,
        model=model_path(FIG1["model"]),
    output:
        png=report(str(FIGURES / "fig1_shaded_generation.png"), caption="../report/fig1.rst", category="Figures"),
        pdf=str(FIGURES / "fig1_shaded_generation.pdf"),
    params:
        stem=str(FIGURES / "fig1_shaded_generation"),
    conda:
        "../../envs/report.yaml"
    log:
        str(RESULTS / "logs" / "figure1.log"),
    shell:
        "mars report figure --config {CONFIGFILE} --name fig1 --inputs {input.eval} {input.model} --output {params.stem} > {log} 2>&1"


rule figure3:
    input:
        table8=str(TABLES / "table8.csv"),
        table2=str(TABLES / "table2.csv"),
    output:
        png=report(str(FIGURES / "fig3_pareto.png"), caption="../report/fig3.rst", category="Figures"),
        pdf=str(FIGURES / "fig3_pareto.pdf"),
    params:
        stem=str(FIGURES / "fig3_pareto"),
    conda:
        "../../envs/report.yaml"
    log:
        str(RESULTS / "logs" / "figure3.log"),
    shell:
        "mars report figure --config {CONFIGFILE} --name fig3 --inputs {input.table8} {input.table2} --output {params.stem} > {log} 2>&1"


rule figure6:
    input:
        FIG6_INPUTS,
    output:
        png=report(str(FIGURES / "fig6_acceptance_metrics.png"), caption="../report/fig6.rst", category="Figures"),
        pdf=str(FIGURES / "fig6_acceptance_metrics.pdf"),
    params:
        stem=str(FIGURES / "fig6_acceptance_metrics"),
    conda:
        "../../envs/report.yaml"
    log:
        str(RESULTS / "logs" / "figure6.log"),
    shell:
        "mars report figure --config {CONFIGFILE} --name fig6 --inputs {input} --output {params.stem} > {log} 2>&1"


rule figure_wallclock:
    input:
        rules.bench.output.csv,
    output:
        png=report(str(FIGURES / "fig_wallclock.png"), caption="../report/wallclock.rst", category="Figures"),
        pdf=str(FIGURES / "fig_wallclock.pdf"),
    params:
        stem=str(FIGURES / "fig_wallclock"),
    conda:
        "../../envs/report.yaml"
    log:
        str(RESULTS / "logs" / "figure_wallclock.log"),
    shell:
        "mars report figure --config {CONFIGFILE} --name wallclock --inputs {input} --output {params.stem} > {log} 2>&1"
