# Stage 5: tables (CSV + Markdown + LaTeX) and figures (PNG + PDF), each from one script over pipeline outputs.
# The rows of every table and the evaluations behind them are declared once, in mars.pipeline.experiments.

EVAL_TABLES = [t for t in X.TABLES if t not in ("table5", "cost")]
TABLE_INPUTS = {t: setting_files(X.table_settings(config, t)) for t in EVAL_TABLES}
FIG1_INPUT = setting_files(X.figure_settings(config, "fig1"))[X.FAMILIES.index(config["eval"]["figure1"]["family"])]
FIG6_INPUTS = setting_files(X.figure_settings(config, "fig6"))
REPORT_COMMAND = "mars report {params.what} --job {params.job:q} --results-dir {RESULTS_ROOT}"


def report_job(**job):
    return J.as_param({"experiment": config["name"], **job})


rule table:
    input:
        evals=lambda wildcards: TABLE_INPUTS[wildcards.table],
        models=lambda wildcards: [model_dir(m) for m in X.table_models(config, wildcards.table)],
    output:
        csv=report(str(TABLES / "{table}.csv"), caption="../report/table.rst", category="Tables"),
        md=str(TABLES / "{table}.md"),
        tex=str(TABLES / "{table}.tex"),
    params:
        what="table",
        job=lambda wildcards: J.as_param(J.table_job(config, wildcards.table)),
    wildcard_constraints:
        table="|".join(EVAL_TABLES),
    conda:
        "../../envs/report.yaml"
    log:
        str(RESULTS / "logs" / "{table}.log"),
    shell:
        REPORT_COMMAND + " --results {RESULTS} --inputs {input.evals} --output {output.csv} > {log} 2>&1"


rule table5:
    input:
        bench=rules.bench.output.csv,
    output:
        csv=report(str(TABLES / "table5.csv"), caption="../report/table5.rst", category="Tables"),
        md=str(TABLES / "table5.md"),
        tex=str(TABLES / "table5.tex"),
    params:
        what="table",
        job=J.as_param(J.table_job(config, "table5")),
    conda:
        "../../envs/report.yaml"
    log:
        str(RESULTS / "logs" / "table5.log"),
    shell:
        REPORT_COMMAND + " --results {RESULTS} --bench {input.bench} --output {output.csv} > {log} 2>&1"


rule cost_table:
    input:
        benchmarks=[str(BENCHMARKS / "train" / f"{m}.tsv") for m in X.table_models(config, "cost")],
        models=[model_dir(m) for m in X.table_models(config, "cost")],
    output:
        csv=report(str(TABLES / "cost.csv"), caption="../report/cost.rst", category="Tables"),
        md=str(TABLES / "cost.md"),
        tex=str(TABLES / "cost.tex"),
    params:
        what="table",
        job=J.as_param(J.table_job(config, "cost")),
    conda:
        "../../envs/report.yaml"
    log:
        str(RESULTS / "logs" / "cost.log"),
    shell:
        REPORT_COMMAND + " --results {RESULTS} --inputs {input.benchmarks} --output {output.csv} > {log} 2>&1"


if SPEC_MODELS:

    rule table6:
        input:
            spec=rules.speculate.output.csv,
            models=[model_dir(m) for m in X.table_models(config, X.SPEC_TABLE)],
        output:
            csv=report(str(TABLES / "table6.csv"), caption="../report/table6.rst", category="Tables"),
            md=str(TABLES / "table6.md"),
            tex=str(TABLES / "table6.tex"),
        params:
            what="table",
            job=J.as_param(J.table_job(config, X.SPEC_TABLE)),
        conda:
            "../../envs/report.yaml"
        log:
            str(RESULTS / "logs" / "table6.log"),
        shell:
            REPORT_COMMAND + " --results {RESULTS} --bench {input.spec} --output {output.csv} > {log} 2>&1"


if config["eval"]["real_tasks"]:

    rule real_model_table:
        input:
            evals=setting_files(X.table_settings(config, X.REAL_TABLE)),
            text_loss=[str(RESULTS / "text_loss" / f"{m}.json") for m in X.text_loss_models(config)],
            models=[model_dir(m) for m in X.table_models(config, X.REAL_TABLE)],
        output:
            csv=report(str(TABLES / "real_model.csv"), caption="../report/table.rst", category="Tables"),
            md=str(TABLES / "real_model.md"),
            tex=str(TABLES / "real_model.tex"),
        params:
            what="table",
            job=J.as_param(J.table_job(config, X.REAL_TABLE)),
        conda:
            "../../envs/report.yaml"
        log:
            str(RESULTS / "logs" / "real_model.log"),
        shell:
            REPORT_COMMAND + " --results {RESULTS} --inputs {input.evals} --text-loss {input.text_loss}"
            " --output {output.csv} > {log} 2>&1"


rule figure1:
    input:
        eval=FIG1_INPUT,
        model=model_path(config["eval"]["figure1"]["model"]),
    output:
        png=report(str(FIGURES / "fig1_shaded_generation.png"), caption="../report/fig1.rst", category="Figures"),
        pdf=str(FIGURES / "fig1_shaded_generation.pdf"),
    params:
        what="figure",
        job=report_job(figure="fig1"),
        stem=str(FIGURES / "fig1_shaded_generation"),
    conda:
        "../../envs/report.yaml"
    log:
        str(RESULTS / "logs" / "figure1.log"),
    shell:
        REPORT_COMMAND + " --inputs {input.eval} {input.model} --output {params.stem} > {log} 2>&1"


rule figure3:
    input:
        table8=str(TABLES / "table8.csv"),
        table2=str(TABLES / "table2.csv"),
    output:
        png=report(str(FIGURES / "fig3_pareto.png"), caption="../report/fig3.rst", category="Figures"),
        pdf=str(FIGURES / "fig3_pareto.pdf"),
    params:
        what="figure",
        job=report_job(figure="fig3"),
        stem=str(FIGURES / "fig3_pareto"),
    conda:
        "../../envs/report.yaml"
    log:
        str(RESULTS / "logs" / "figure3.log"),
    shell:
        REPORT_COMMAND + " --inputs {input.table8} {input.table2} --output {params.stem} > {log} 2>&1"


rule figure6:
    input:
        FIG6_INPUTS,
    output:
        png=report(str(FIGURES / "fig6_acceptance_metrics.png"), caption="../report/fig6.rst", category="Figures"),
        pdf=str(FIGURES / "fig6_acceptance_metrics.pdf"),
    params:
        what="figure",
        job=report_job(figure="fig6"),
        stem=str(FIGURES / "fig6_acceptance_metrics"),
    conda:
        "../../envs/report.yaml"
    log:
        str(RESULTS / "logs" / "figure6.log"),
    shell:
        REPORT_COMMAND + " --inputs {input} --output {params.stem} > {log} 2>&1"


rule figure_wallclock:
    input:
        rules.bench.output.csv,
    output:
        png=report(str(FIGURES / "fig_wallclock.png"), caption="../report/wallclock.rst", category="Figures"),
        pdf=str(FIGURES / "fig_wallclock.pdf"),
    params:
        what="figure",
        job=report_job(figure="wallclock"),
        stem=str(FIGURES / "fig_wallclock"),
    conda:
        "../../envs/report.yaml"
    log:
        str(RESULTS / "logs" / "figure_wallclock.log"),
    shell:
        REPORT_COMMAND + " --inputs {input} --output {params.stem} > {log} 2>&1"


# The scaling study (config section `study`): `snakemake results/tables/scaling.csv` (not in the default target).
if config.get("study"):
    STUDY_INPUTS = setting_files(X.study_settings(config))

    rule scaling_table:
        input:
            evals=STUDY_INPUTS,
            models=[model_dir(m) for m in X.study_models(config)],
        output:
            csv=report(str(TABLES / "scaling.csv"), caption="../report/scaling.rst", category="Tables"),
            md=str(TABLES / "scaling.md"),
            tex=str(TABLES / "scaling.tex"),
        params:
            what="table",
            job=J.as_param(J.study_job(config)),
        conda:
            "../../envs/report.yaml"
        log:
            str(RESULTS / "logs" / "scaling.log"),
        shell:
            REPORT_COMMAND + " --results {RESULTS} --inputs {input.evals} --output {output.csv} > {log} 2>&1"

    rule figure_scaling:
        input:
            rules.scaling_table.output.csv,
        output:
            png=report(str(FIGURES / "fig_scaling.png"), caption="../report/scaling.rst", category="Figures"),
            pdf=str(FIGURES / "fig_scaling.pdf"),
            heldout_png=report(str(FIGURES / "fig_heldout_loss.png"), caption="../report/scaling.rst",
                               category="Figures"),
            heldout_pdf=str(FIGURES / "fig_heldout_loss.pdf"),
        params:
            scaling=report_job(figure="scaling"),
            heldout=report_job(figure="heldout"),
            stem=str(FIGURES / "fig_scaling"),
            heldout_stem=str(FIGURES / "fig_heldout_loss"),
        conda:
            "../../envs/report.yaml"
        log:
            str(RESULTS / "logs" / "figure_scaling.log"),
        shell:
            "(mars report figure --job {params.scaling:q} --results-dir {RESULTS_ROOT} --inputs {input}"
            " --output {params.stem} && mars report figure --job {params.heldout:q} --results-dir {RESULTS_ROOT}"
            " --inputs {input} {RESULTS} --output {params.heldout_stem}) > {log} 2>&1"

    rule study:  # `snakemake study`: the scaling table and its two figures
        input:
            rules.scaling_table.output.csv,
            rules.figure_scaling.output.png,


# The learning curve (config section `curve`, docs/smollm2_curve.md): `snakemake curve` (not in the default target).
if config.get("curve"):

    rule curve_table:
        input:
            evals=setting_files(X.table_settings(config, X.CURVE_TABLE)),
            models=[model_dir(m) for m in X.table_models(config, X.CURVE_TABLE)],
        output:
            csv=report(str(TABLES / "curve.csv"), caption="../report/table.rst", category="Tables"),
            md=str(TABLES / "curve.md"),
            tex=str(TABLES / "curve.tex"),
        params:
            what="table",
            job=J.as_param(J.table_job(config, X.CURVE_TABLE)),
        conda:
            "../../envs/report.yaml"
        log:
            str(RESULTS / "logs" / "curve.log"),
        shell:
            REPORT_COMMAND + " --results {RESULTS} --inputs {input.evals} --output {output.csv} > {log} 2>&1"

    rule figure_curve:
        input:
            rules.curve_table.output.csv,
        output:
            png=report(str(FIGURES / "fig_curve.png"), caption="../report/table.rst", category="Figures"),
            pdf=str(FIGURES / "fig_curve.pdf"),
        params:
            what="figure",
            job=report_job(figure="curve"),
            stem=str(FIGURES / "fig_curve"),
        conda:
            "../../envs/report.yaml"
        log:
            str(RESULTS / "logs" / "figure_curve.log"),
        shell:
            REPORT_COMMAND + " --inputs {input} --output {params.stem} > {log} 2>&1"

    rule curve:  # `snakemake curve`: the learning-curve table and its figure
        input:
            rules.curve_table.output.csv,
            rules.figure_curve.output.png,
