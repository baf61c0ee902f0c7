# Paths and helpers shared by every stage. What each job runs with comes from mars.pipeline.jobs, handed to the
# job as one `job` param (canonical JSON): Snakemake reruns a job exactly when that param, its inputs or its code
# change.
import shlex
from pathlib import Path

from mars.pipeline import experiments as X
from mars.pipeline import jobs as J
from mars.pipeline.config import train_spec
from mars.pipeline.offline import offline_env, prefetch_job

RESULTS_ROOT = Path(config["results_dir"])
RESULTS = RESULTS_ROOT / config["name"]
WORLD = RESULTS / "world"
TINY = config["world"]["kind"] == "tiny"
# a tiny world's tasks on a real starting model (world.start; docs/smollm2.md): imported by the rule import_start
START = str(RESULTS / "start") if TINY and config["world"].get("start") else None
TABLES = Path(config["report"]["tables_dir"] or RESULTS_ROOT / "tables")
FIGURES = Path(config["report"]["figures_dir"])
BENCHMARKS = RESULTS / "benchmarks"  # Snakemake's own measurements of each job (wall time, peak memory)
SETTING = "{method}-tau{tau}-{metric}"
# the held-out records every training run logs its next-token loss on (tiny: heldout_per_family, hf: heldout_every)
HAS_HELDOUT = config["world"].get("heldout_per_family" if TINY else "heldout_every")
HELDOUT = str(WORLD / "data" / "heldout.jsonl") if HAS_HELDOUT else None

# Offline clusters (offline.cache_dir; workflow/rules/offline.smk): the local rule `prefetch` fills the cache, and
# the jobs that would read the hub (world, train, evaluate, bench) run with OFFLINE_ENV in front of their command:
# the caches inside cache_dir, the hub switched off. Their dependency on the prefetch is `ancient`: a prefetch rerun
# (e.g. a new harness task) does not rerun finished jobs. Without the key both are empty: jobs use the hub.
OFFLINE_CACHE = str(Path(config["offline"]["cache_dir"]).resolve()) if config["offline"]["cache_dir"] else None
OFFLINE_ENV = "".join(f"{k}={shlex.quote(v)} " for k, v in offline_env(OFFLINE_CACHE).items()) if OFFLINE_CACHE else ""
PREFETCH_FLAG = str(Path(OFFLINE_CACHE) / "prefetched" / f"{config['name']}.json") if OFFLINE_CACHE else None
PREFETCHED = [ancient(PREFETCH_FLAG)] if OFFLINE_CACHE else []


def model_dir(name):
    return str(RESULTS / "models" / name)


def model_path(name):
    """Folder (or hub id) of a model: "world" is the world's own starting checkpoint."""
    if name == "world":
        if START:
            return START
        return str(WORLD / "init") if TINY else config["world"]["base_model"]
    return model_dir(name)


def init_path(name):
    """Starting checkpoint of a training job: its init model, or (hf world, init world) its own base_model if set
    (Table 6's smaller draft)."""
    entry = config["models"][name]
    if entry["init"] == "world" and entry.get("base_model"):
        return entry["base_model"]
    return model_path(entry["init"])


def train_data_dir(name):
    """The data folder a training job reads: the world's, or (targets: self_greedy) its init model's own greedy
    answers to the entry's split (rule distill)."""
    spec = train_spec(config, name)
    if spec.targets == "self_greedy":
        return str(RESULTS / "distilled" / spec.init / spec.split)
    return str(WORLD / "data")


def init_input(wildcards):
    """Snakemake inputs of a training job (a hub id is not a file): its data, its start, and the model of a chain
    it goes on from (resume_from)."""
    spec = train_spec(config, wildcards.model)
    data = train_data_dir(wildcards.model)
    inputs = {"data": data if spec.targets == "self_greedy" else f"{data}/{spec.split}.jsonl", "prefetched": PREFETCHED}
    if HELDOUT:
        inputs["heldout"] = HELDOUT
    if config["models"][wildcards.model]["init"] != "world" or TINY:
        inputs["init"] = init_path(wildcards.model)
    if spec.resume_from:
        inputs["resume_from"] = model_dir(spec.resume_from)
    return inputs


def setting_files(settings):
    return [f for s in settings for f in s.files(RESULTS)]
