# Paths and helpers shared by every stage.
from pathlib import Path

RESULTS = Path(config.get("results_dir", "results")) / config["name"]
WORLD = RESULTS / "world"
TINY = config["world"]["kind"] == "tiny"


def model_dir(name):
    return str(RESULTS / "models" / name)


def init_path(name):
    """The starting checkpoint of a model entry: the world's initial model, or another entry's output."""
    init = config["models"][name].get("init", "world")
    if init == "world":
        return str(WORLD / "init") if TINY else config["world"]["base_model"]
    return model_dir(init)


def init_input(wildcards):
    """Snakemake inputs of a training job (a hub id is not a file)."""
    name = wildcards.model
    inputs = {"data": str(WORLD / "data" / "train.jsonl")}
    init = config["models"][name].get("init", "world")
    if init != "world" or TINY:
        inputs["init"] = init_path(name)
    return inputs
