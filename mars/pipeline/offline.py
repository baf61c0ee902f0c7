"""Offline clusters: fetch everything a run needs into one cache folder first, then run every job offline from it.

``offline.cache_dir`` (config; default null = off) names the folder. The workflow's local rule ``prefetch`` (on the
login node, which reaches the hub) runs ``mars prefetch``; every compute job then runs with the environment of
:func:`offline_env`: the Hugging Face caches and nltk's data inside the folder, and the hub switched off.

    <cache>/huggingface/hub/          model snapshots (huggingface_hub.snapshot_download)
    <cache>/huggingface/datasets/     prepared data sets (datasets.load_dataset): the SFT data, the harness's
    <cache>/nltk_data/                punkt_tab (IFEval's sentence splitter)
    <cache>/prefetched/<name>.json    what was fetched for experiment <name> (the rule's output)

What a run needs (:func:`fetch_plan`): the base model and the SFT data set of an ``hf`` world (unless they are local
folders: a mirror, see mars.pipeline.mirror), the data sets of the harness tasks of the paper profile, as the INSTALLED
lm-eval's task configs name them (``dataset_path`` / ``dataset_name``; group tasks such as bbh_cot_fewshot expand to
their subtasks), and punkt_tab when IFEval is evaluated. Anything already in the cache is not fetched again, and a
plan with nothing missing touches no network at all. Idavidrein/gpqa is gated: accept its terms on the hub and set
``HF_TOKEN`` on the login node.
"""

from __future__ import annotations

import functools
import glob
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from mars.fileio import write_json_atomic
from mars.pipeline.config import ConfigError

GATED = {"Idavidrein/gpqa"}
# only what from_pretrained reads (config, weights, tokenizer, chat template), not e.g. other weight formats
MODEL_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.jinja", "*.model", "*.tiktoken"]


def cache_paths(cache_dir: str | Path) -> dict[str, Path]:
    root = Path(cache_dir).resolve()
    hf_home = root / "huggingface"
    return {"hf_home": hf_home, "hub": hf_home / "hub", "datasets": hf_home / "datasets", "nltk": root / "nltk_data"}


def user_token_path() -> str:
    """Where huggingface_hub keeps the token of ``hf auth login`` for the CURRENT environment (before HF_HOME is
    moved into the cache, which would hide it)."""
    if os.environ.get("HF_TOKEN_PATH"):
        return os.environ["HF_TOKEN_PATH"]
    cache_home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(
        os.path.expanduser(os.environ.get("HF_HOME") or os.path.join(cache_home, "huggingface")), "token"
    )


def offline_env(cache_dir: str | Path, offline: bool = True) -> dict[str, str]:
    """The environment of a job that reads the cache: the caches' locations and (``offline``) the hub switched off.
    The prefetch job itself gets the locations only, and keeps the user's login token where it was."""
    paths = cache_paths(cache_dir)
    env = {
        "HF_HOME": str(paths["hf_home"]),
        "HF_HUB_CACHE": str(paths["hub"]),
        "HF_DATASETS_CACHE": str(paths["datasets"]),
        "NLTK_DATA": str(paths["nltk"]),
    }
    if offline:
        env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    else:
        env["HF_TOKEN_PATH"] = user_token_path()
    return env


def prefetch_job(config: dict) -> dict:
    """What the prefetch job of a (validated) config fetches, as the settings it gets: a pure function of the
    config, so a changed model, data set or evaluation profile reruns it."""
    from mars.evaluation.tasks import PAPER_TASKS

    world = config["world"]
    job = {"experiment": config["name"], "model": None, "dataset": None, "split": None, "harness_tasks": []}
    if world["kind"] == "hf":
        job.update(model=world["base_model"], dataset=world["dataset"], split=world["split"])
    if config["eval"]["profile"] == "paper":
        job["harness_tasks"] = list(PAPER_TASKS.values())
    # other starts of model entries (models.<name>.base_model: Table 6's smaller draft); only when there are any, so
    # that the prefetch of a config without them is unchanged
    starts = sorted({m["base_model"] for m in config["models"].values() if m.get("base_model")})
    if starts:
        job["base_models"] = starts
    return job


@dataclass(frozen=True)
class FetchItem:
    """One thing a run needs: a model snapshot, a data set (one config of it), or an nltk resource."""

    kind: str  # model | dataset | nltk
    source: str  # hub id, local folder, or nltk resource name
    name: str | None = None  # data set config (dataset_name)
    local: bool = False  # a folder on this file system: nothing to fetch
    gated: bool = False  # the hub asks for accepted terms and a token

    def label(self) -> str:
        return f"{self.kind} {self.source}" + (f" ({self.name})" if self.name else "")


def is_local(source: str) -> bool:
    """A path that exists here is a local folder, as transformers and datasets decide; one that looks like a path
    but does not exist is an error (never sent to the hub as an id)."""
    if Path(source).exists():
        return True
    if source.startswith(("/", "./", "../", "~")) or source.count("/") != 1:
        raise ConfigError(f"local folder not found: {source} (a hub id has the form owner/name)")
    return False


@functools.cache
def _task_index() -> dict:
    """The installed lm-eval's task index (building it reads every task YAML: seconds, so once per process)."""
    from lm_eval.tasks import TaskManager

    return TaskManager().task_index


def harness_datasets(tasks: list[str]) -> list[tuple[str, str | None]]:
    """(dataset_path, dataset_name) of each harness task, as the installed lm-eval's task configs say; a group
    (bbh_cot_fewshot, mmlu_pro) contributes its subtasks'. In first-seen order, without duplicates."""
    index = _task_index()
    found: list[tuple[str, str | None]] = []

    def visit(name: str) -> None:
        entry = index.get(name)
        if entry is None:
            raise ConfigError(f"the installed lm-eval has no task {name!r}")
        cfg = entry.cfg or {}
        subtasks = cfg.get("task")
        if "group" in cfg and isinstance(subtasks, list):
            for sub in subtasks:
                visit(sub if isinstance(sub, str) else sub["task"])
            return
        if not cfg.get("dataset_path"):
            raise ConfigError(f"harness task {name!r} names no dataset_path")
        item = (cfg["dataset_path"], cfg.get("dataset_name"))
        if item not in found:
            found.append(item)

    for task in tasks:
        visit(task)
    return found


def fetch_plan(job: dict) -> list[FetchItem]:
    """Everything a run with these prefetch settings needs, local folders marked as such."""
    items = []
    if job.get("model"):
        items.append(FetchItem("model", job["model"], local=is_local(job["model"])))
    for model in job.get("base_models") or []:
        items.append(FetchItem("model", model, local=is_local(model)))
    if job.get("dataset"):
        items.append(FetchItem("dataset", job["dataset"], local=is_local(job["dataset"])))
    tasks = job.get("harness_tasks") or []
    for path, name in harness_datasets(tasks) if tasks else []:
        items.append(FetchItem("dataset", path, name, local=is_local(path), gated=path in GATED))
    if "ifeval" in tasks:
        items.append(FetchItem("nltk", "punkt_tab"))
    return items


# ----------------------------------------------------------------------------------------------------------------
# what is in the cache


def _dataset_cached(datasets_cache: Path, repo_id: str, name: str | None) -> bool:
    """Whether ``load_dataset(repo_id, name)`` can be answered from the cache offline: datasets then looks for a
    prepared copy in <cache>/<owner>___<snake_case name>/<config>/<version>/<hash>/ (its CachedDatasetModuleFactory)."""
    from datasets.naming import camelcase_to_snakecase

    owner, _, dataset = repo_id.rpartition("/")
    folder = "___".join([p for p in (owner, camelcase_to_snakecase(dataset)) if p])
    pattern = str(
        datasets_cache / glob.escape(folder) / glob.escape(name or "default") / "*" / "*" / "dataset_info.json"
    )
    return bool(glob.glob(pattern))


def is_cached(item: FetchItem, cache_dir: str | Path) -> bool:
    paths = cache_paths(cache_dir)
    if item.local:
        return True
    if item.kind == "model":
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import LocalEntryNotFoundError

        try:
            snapshot_download(item.source, cache_dir=paths["hub"], local_files_only=True)
            return True
        except LocalEntryNotFoundError:
            return False
    if item.kind == "dataset":
        return _dataset_cached(paths["datasets"], item.source, item.name)
    if item.kind == "nltk":
        import nltk

        try:
            nltk.data.find(f"tokenizers/{item.source}", paths=[str(paths["nltk"])])
            return True
        except LookupError:
            return False
    raise ValueError(f"unknown fetch item kind {item.kind!r}")


def _fetch(item: FetchItem, cache_dir: str | Path, split: str | None) -> None:
    paths = cache_paths(cache_dir)
    if item.kind == "model":
        from huggingface_hub import snapshot_download

        snapshot_download(item.source, cache_dir=paths["hub"], allow_patterns=MODEL_PATTERNS)
    elif item.kind == "dataset":
        from datasets import load_dataset

        # every split (the harness reads test, train, validation or few-shot splits); the SFT set: its split only
        load_dataset(item.source, item.name, split=split, cache_dir=str(paths["datasets"]))
    elif item.kind == "nltk":
        import nltk

        if not nltk.download(item.source, download_dir=str(paths["nltk"]), quiet=True, raise_on_error=True):
            raise ConfigError(f"nltk could not download {item.source}")


def prefetch(job: dict, cache_dir: str | Path, output: str | Path | None = None) -> dict:
    """Fetch what is missing from the cache. With the hub switched off (HF_HUB_OFFLINE) nothing is fetched: a
    missing item is an error that names it. Writes ``output`` (the plan and what was done) when all is there."""
    plan = fetch_plan(job)
    offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
    done = []
    missing = [item for item in plan if not is_cached(item, cache_dir)]
    if missing and offline:
        raise ConfigError(
            f"HF_HUB_OFFLINE is set and the cache {cache_dir} lacks {len(missing)} item(s): "
            + "; ".join(item.label() for item in missing)
        )
    gated = [item.source for item in missing if item.gated]
    if gated and not (os.environ.get("HF_TOKEN") or Path(user_token_path()).is_file()):  # before fetching anything
        raise ConfigError(
            f"{gated[0]} is gated: accept its terms on huggingface.co, then export HF_TOKEN (or run "
            "`hf auth login`) before prefetching"
        )
    for item in missing:
        try:
            _fetch(item, cache_dir, job.get("split") if item.source == job.get("dataset") else None)
        except ConfigError:
            raise
        except Exception as exc:  # network, authentication, unknown repo: one line naming the item
            raise ConfigError(
                f"cannot fetch {item.label()}: {str(exc).splitlines()[0] if str(exc) else exc!r}"
            ) from exc
        done.append(item.label())
    summary = {
        "cache_dir": str(Path(cache_dir).resolve()),
        "job": job,
        "plan": [asdict(item) for item in plan],
        "fetched": done,
        "already_there": [item.label() for item in plan if item.label() not in done],
    }
    if output:
        write_json_atomic(output, summary)
    return summary


def add_parser(commands) -> None:
    """``mars prefetch`` (registered by mars.cli)."""
    cmd = commands.add_parser(
        "prefetch", help="fetch the model, data sets and harness data a config needs into a cache folder"
    )
    cmd.add_argument("--config", help="config file")
    cmd.add_argument("--job", help="the prefetch settings as JSON (what the pipeline passes), instead of --config")
    cmd.add_argument("--cache", required=True, help="cache folder (the config's offline.cache_dir)")
    cmd.add_argument("--output", help="summary JSON to write when everything is in the cache")
    cmd.add_argument("--dry-run", action="store_true", help="print what would be fetched, fetch nothing")
    cmd.set_defaults(run=_run)


def _run(args) -> None:
    import json

    from mars.pipeline.config import load_config
    from mars.pipeline.jobs import parse_job

    if bool(args.job) == bool(args.config):
        raise ConfigError("give either --job or --config")
    if args.config:
        config = load_config(args.config)
        if not (config.get("offline") or {}).get("cache_dir"):  # (a dry run gives the same verdict)
            raise ConfigError(
                f"{args.config} has no offline.cache_dir: its jobs would not read a prefetched cache (add "
                f"'offline: {{cache_dir: {args.cache}}}' to it)"
            )
    job = parse_job(args.job) if args.job else prefetch_job(config)
    # the libraries read their cache locations when imported: set them before any import
    os.environ.update(offline_env(args.cache, offline=False))
    if args.dry_run:
        plan = fetch_plan(job)
        if not plan:
            print("nothing to fetch: the config needs no hub model, data set or harness data")
        for item in plan:
            state = "local" if item.local else ("cached" if is_cached(item, args.cache) else "to fetch")
            print(f"{state:9s} {item.label()}{'  [gated: needs HF_TOKEN]' if item.gated else ''}")
        return
    print(json.dumps(prefetch(job, args.cache, args.output), indent=2))
