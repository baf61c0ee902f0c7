# The MARS replication pipeline. `snakemake --cores all` runs the tiny default (config.yaml) on a laptop CPU;
# `--configfile configs/paper-0.5b.yaml` (with `--profile slurm` on a GPU cluster) runs the paper-scale configs.
from snakemake.utils import validate

configfile: "config.yaml"


validate(config, "workflow/schemas/config.schema.json")


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"


rule all:
    input:
        [model_dir(name) for name in config["models"]],
