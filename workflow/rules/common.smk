# Paths and helpers shared by every stage.
from pathlib import Path

from mars.config import train_spec

RESULTS_ROOT = Path(config.get("results_dir", "results"))
RESULTS = RESULTS_ROOT / config["name"]
WORLD = RESULTS / "world"
TINY = config["world"]["kind"] == "tiny"
TABLES = Path(config.get("report", {}).get("tables_dir", RESULTS_ROOT / "tables"))
FIGURES = Path(config.get("report", {}).get("figures_dir", "paper_figures"))
EVAL = config.get("eval", {})
BENCH = config.get("bench", {})
FAMILIES = ["ifeval", "bbh", "mmlu_pro", "gpqa", "gsm8k", "humaneval"]
# lm-eval task of each family, per profile (the paper profile uses the harness's own tasks)
TASK_NAMES = {f: f"tiny_{f}" for f in FAMILIES}
SWEEP_TAUS = EVAL.get("sweep_taus", [1.0, 0.95, 0.9, 0.8, 0.7, 0.6, 0.5])
SWEEP_FAMILIES = ["gsm8k", "humaneval"]
EVAL_PROFILE = EVAL.get("profile", "tiny")
EVAL_CACHE = EVAL.get("cache", "cursor")
EVAL_BATCH = EVAL.get("batch_size", 16)
EVAL_TOKENS = EVAL.get("max_gen_toks", 256)
BASE = config.get("report", {}).get("base_model", "base" if TINY else "world")
CONFIGFILE = workflow.configfiles[-1] if workflow.configfiles else "config.yaml"


def model_dir(name):
    return str(RESULTS / "models" / name)


def model_path(name):
    """Folder (or hub id) of a model: "world" is the world's own starting checkpoint."""
    if name == "world":
        return str(WORLD / "init") if TINY else config["world"]["base_model"]
    return model_dir(name)


def init_path(name):
    return model_path(config["models"][name].get("init", "world"))


def init_input(wildcards):
    """Snakemake inputs of a training job (a hub id is not a file)."""
    inputs = {"data": str(WORLD / "data" / f"{train_spec(config, wildcards.model).split}.jsonl")}
    init = config["models"][wildcards.model].get("init", "world")
    if init != "world" or TINY:
        inputs["init"] = init_path(wildcards.model)
    return inputs


def decode_method(name):
    """How a model is decoded in one-token mode and beyond (mirrors mars.report.tables.decode_method)."""
    if name not in config["models"]:
        return "ar"
    return {"block_diffusion": "block_diffusion", "mars": "mars"}.get(config["models"][name]["method"], "ar")


def present(*names):
    return [n for n in names if n == "world" or n in config["models"]]


def eval_file(model, method, tau, metric, family, kind="eval"):
    return str(RESULTS / kind / model / f"{method}-tau{float(tau):g}-{metric}" / f"{family}.json")


def evals_at(models, tau, families=FAMILIES, metric="probability"):
    return [eval_file(m, decode_method(m), tau, metric, f) for m in models for f in families]
