# Paths and helpers shared by every stage. What each job runs with comes from mars.experiments, handed to the job
# as one `job` param (canonical JSON): Snakemake reruns a job exactly when that param, its inputs or its code change.
from pathlib import Path

from mars import experiments as X
from mars.config import train_spec

RESULTS_ROOT = Path(config["results_dir"])
RESULTS = RESULTS_ROOT / config["name"]
WORLD = RESULTS / "world"
TINY = config["world"]["kind"] == "tiny"
TABLES = Path(config["report"]["tables_dir"] or RESULTS_ROOT / "tables")
FIGURES = Path(config["report"]["figures_dir"])
BENCHMARKS = RESULTS / "benchmarks"  # Snakemake's own measurements of each job (wall time, peak memory)
SETTING = "{method}-tau{tau}-{metric}"


def model_dir(name):
    return str(RESULTS / "models" / name)


def model_path(name):
    """Folder (or hub id) of a model: "world" is the world's own starting checkpoint."""
    if name == "world":
        return str(WORLD / "init") if TINY else config["world"]["base_model"]
    return model_dir(name)


def init_path(name):
    return model_path(config["models"][name]["init"])


def init_input(wildcards):
    """Snakemake inputs of a training job (a hub id is not a file)."""
    inputs = {"data": str(WORLD / "data" / f"{train_spec(config, wildcards.model).split}.jsonl")}
    if config["models"][wildcards.model]["init"] != "world" or TINY:
        inputs["init"] = init_path(wildcards.model)
    return inputs


def setting_files(settings):
    return [f for s in settings for f in s.files(RESULTS)]
