# The MARS replication pipeline: data -> base -> AR SFT -> MARS and ablations -> evaluations -> tau sweeps and
# wall-clock runs -> results/tables/*.csv and paper_figures/.
#   snakemake --cores all                              the tiny default (config.yaml), on a laptop CPU
#   snakemake results/tables/table2.csv                only what Table 2 needs
#   snakemake --cores all --profile slurm --configfile configs/paper-0.5b.yaml   paper scale on a cluster
import os
import sys

# Jobs call the `mars` command of the interpreter running Snakemake (e.g. .venv/bin/snakemake without activating
# the venv); a rule's conda environment, when used, comes first on PATH instead.
os.environ["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])

from mars.pipeline.config import ConfigError, check_model_references, validate


def config_error(message, name_files=True):
    """The project's one line, first and alone (not inside Snakemake's frame of the Snakefile's traceback)."""
    files = ", ".join(map(str, workflow.overwrite_configfiles)) or "config.yaml"
    sys.stderr.write(f"error: {message}{f' (config: {files})' if name_files else ''}\n")
    sys.exit(2)


# The tiny default, unless --configfile names another config (Snakemake would otherwise merge the two); a --config
# override alone still applies on top of it.
if not workflow.overwrite_configfiles:
    if not os.path.isfile("config.yaml"):
        config_error(f"no config.yaml in {os.getcwd()}: run from the repository, or give --configfile FILE", False)

    configfile: "config.yaml"


try:
    validate(config)  # fills in the schema's defaults (mars/schemas/config.schema.json)
    check_model_references(config)  # every model a table, figure or the bench names is a model entry
except ConfigError as exc:
    config_error(exc)


report: "workflow/report/workflow.rst"


from mars.pipeline.tracking import config_hash

os.environ["MARS_CONFIG_HASH"] = config_hash(config)  # tagged on every MLflow run of this pipeline


include: "workflow/rules/common.smk"
include: "workflow/rules/offline.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/eval.smk"
include: "workflow/rules/bench.smk"
include: "workflow/rules/speculative.smk"
include: "workflow/rules/report.smk"


rule all:
    input:
        [str(TABLES / f"{name}.csv") for name in X.tables(config)],  # Table 6 only with a speculative section
        # every evaluation result is a target too: one that was deleted is rebuilt, then what reads it
        setting_files(X.all_settings(config)),
        rules.figure1.output,
        rules.figure3.output,
        rules.figure6.output,
        rules.figure_wallclock.output,
