"""The offline cache (mars.pipeline.offline): what a config needs fetched, and a prefetch that has nothing to fetch
stays off the network. No test here reaches the hub."""

import json
import re
from pathlib import Path

import pytest
import yaml

from mars.pipeline.config import ConfigError, validate
from mars.pipeline.offline import fetch_plan, offline_env, prefetch, prefetch_job

ROOT = Path(__file__).resolve().parents[1]


def paper_config() -> dict:
    return validate(yaml.safe_load((ROOT / "configs" / "paper-0.5b.yaml").read_text()))


def harness_yaml_datasets() -> set:
    """(dataset_path, dataset_name) read straight from the installed harness's task YAMLs (not via lm-eval's
    task index, which mars.pipeline.offline uses)."""
    import lm_eval

    tasks = Path(lm_eval.__file__).parent / "tasks"

    def field(text, key):
        match = re.search(rf"^{key}:\s*\"?([^\"\n]+?)\"?\s*$", text, re.M)
        return None if match is None or match.group(1) == "null" else match.group(1)

    found = {
        (field((tasks / "ifeval" / "ifeval.yaml").read_text(), "dataset_path"), None),
        (field((tasks / "mmlu_pro" / "_default_template_yaml").read_text(), "dataset_path"), None),
        (field((tasks / "humaneval" / "humaneval.yaml").read_text(), "dataset_path"), None),
    }
    gsm8k = (tasks / "gsm8k" / "gsm8k-cot-zeroshot.yaml").read_text()
    found.add((field(gsm8k, "dataset_path"), field(gsm8k, "dataset_name")))
    gpqa_path = field((tasks / "gpqa" / "cot_zeroshot" / "_gpqa_cot_zeroshot_yaml").read_text(), "dataset_path")
    found.add(
        (
            gpqa_path,
            field((tasks / "gpqa" / "cot_zeroshot" / "gpqa_main_cot_zeroshot.yaml").read_text(), "dataset_name"),
        )
    )
    bbh_dir = tasks / "bbh" / "cot_fewshot"
    bbh_path = field((bbh_dir / "_cot_fewshot_template_yaml").read_text(), "dataset_path")
    for path in bbh_dir.glob("*.yaml"):
        name = field(path.read_text(), "dataset_name")
        if name:
            found.add((bbh_path, name))
    return found


def test_fetch_plan_of_the_paper_config():
    job = prefetch_job(paper_config())
    plan = fetch_plan(job)
    models = [(i.source, i.local) for i in plan if i.kind == "model"]
    assert models == [("Qwen/Qwen2.5-0.5B-Instruct", False)]
    datasets = {(i.source, i.name) for i in plan if i.kind == "dataset"}
    expected = {("allenai/Dolci-Instruct-SFT", None)} | harness_yaml_datasets()
    assert datasets == expected
    # the harness's own choices, which are not the obvious hub ids: bbh is SaylorTwift/bbh, 27 subtasks
    assert sum(source == "SaylorTwift/bbh" for source, _ in datasets) == 27
    assert ("Idavidrein/gpqa", "gpqa_main") in datasets and ("openai/gsm8k", "main") in datasets
    assert [i.source for i in plan if i.gated] == ["Idavidrein/gpqa"]
    assert [(i.kind, i.source) for i in plan if i.kind == "nltk"] == [("nltk", "punkt_tab")]  # IFEval's splitter
    assert len(plan) == len({(i.kind, i.source, i.name) for i in plan})  # nothing twice (mmlu_pro's 14 subtasks)


def test_fetch_plan_of_a_tiny_config_is_empty():
    config = validate(yaml.safe_load((ROOT / "config.yaml").read_text()))
    assert fetch_plan(prefetch_job(config)) == []


def test_a_missing_local_folder_is_an_error_not_a_hub_id(tmp_path):
    with pytest.raises(ConfigError, match="local folder not found"):
        fetch_plan({"model": str(tmp_path / "nowhere"), "dataset": None, "harness_tasks": []})


def make_cached_dataset(datasets_cache: Path, repo_id: str, name: str, splits: dict) -> None:
    """A data set prepared into the cache as `load_dataset(repo_id, name)` leaves it (datasets' own builder, its
    folder renamed to the hub layout <owner>___<name>/<config>/<version>/<hash>)."""
    import shutil

    import pandas as pd
    from datasets.packaged_modules.parquet.parquet import Parquet

    work = datasets_cache.parent / "work"
    files = {}
    for split, rows in splits.items():
        files[split] = str(work / f"{split}.parquet")
        work.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(rows).to_parquet(files[split])
    owner, dataset = repo_id.split("/")
    builder = Parquet(
        cache_dir=str(work / "cache"), data_files=files, config_name=name, dataset_name=dataset, hash="0" * 16
    )
    builder.download_and_prepare()
    prepared = Path(builder.cache_dir)  # <work>/cache/<dataset>/<name>-<id>/0.0.0/<hash>, <dataset>-<split>.arrow
    target = datasets_cache / f"{owner}___{dataset}" / name / prepared.parts[-2] / prepared.parts[-1]
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(prepared, target)
    shutil.rmtree(work)


def test_prefetch_of_a_mirror_config_with_a_filled_cache_fetches_nothing_offline(tmp_path, monkeypatch, no_network):
    """A local model and data set, and the harness data already in the cache: prefetch has nothing to fetch, opens
    no connection, and the harness's own load_dataset call then finds the data offline."""
    from mars.pipeline.mirror import build_mirror

    mirror = tmp_path / "mirror"
    build_mirror(mirror, ["0.5b"], records=20)
    cache = tmp_path / "cache"
    env = offline_env(cache)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    make_cached_dataset(
        Path(env["HF_DATASETS_CACHE"]),
        "openai/gsm8k",
        "main",
        {"train": [{"question": "1+1?", "answer": "#### 2"}], "test": [{"question": "2+2?", "answer": "#### 4"}]},
    )
    job = {
        "experiment": "mirror",
        "model": str(mirror / "models" / "Qwen2.5-0.5B-Instruct"),
        "dataset": str(mirror / "datasets" / "Dolci-Instruct-SFT"),
        "split": "train",
        "harness_tasks": ["gsm8k_cot_zeroshot"],
    }
    out = cache / "prefetched" / "mirror.json"
    summary = prefetch(job, cache, out)
    assert summary["fetched"] == [] and len(summary["already_there"]) == 3
    assert [p["local"] for p in summary["plan"]] == [True, True, False]
    assert json.loads(out.read_text())["job"] == job
    # what the harness does in the evaluation job: the prepared copy answers, offline
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", Path(env["HF_DATASETS_CACHE"]))
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    loaded = datasets.load_dataset("openai/gsm8k", "main", split="test")
    assert loaded[0] == {"question": "2+2?", "answer": "#### 4"}


def test_prefetch_offline_with_a_missing_item_names_it_and_writes_nothing(tmp_path, monkeypatch, no_network):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    job = {"model": "Qwen/Qwen2.5-0.5B-Instruct", "dataset": None, "harness_tasks": ["gsm8k_cot_zeroshot"]}
    out = tmp_path / "cache" / "prefetched" / "x.json"
    with pytest.raises(ConfigError, match=r"lacks 2 item\(s\): model Qwen/Qwen2.5-0.5B-Instruct; dataset openai/gsm8k"):
        prefetch(job, tmp_path / "cache", out)
    assert not out.exists()


def test_a_gated_data_set_without_a_token_stops_before_any_download(tmp_path, monkeypatch, no_network):
    for var in ("HF_HUB_OFFLINE", "HF_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_TOKEN_PATH", str(tmp_path / "no-token"))
    job = {"model": None, "dataset": None, "harness_tasks": ["gpqa_main_cot_zeroshot", "gsm8k_cot_zeroshot"]}
    with pytest.raises(ConfigError, match="Idavidrein/gpqa is gated.*HF_TOKEN"):
        prefetch(job, tmp_path / "cache")


def test_offline_env_points_every_cache_into_the_folder(tmp_path):
    env = offline_env(tmp_path / "c")
    root = str((tmp_path / "c").resolve())
    assert env["HF_HOME"] == f"{root}/huggingface" and env["HF_HUB_CACHE"] == f"{root}/huggingface/hub"
    assert env["HF_DATASETS_CACHE"] == f"{root}/huggingface/datasets" and env["NLTK_DATA"] == f"{root}/nltk_data"
    assert env["HF_HUB_OFFLINE"] == env["HF_DATASETS_OFFLINE"] == "1"
    online = offline_env(tmp_path / "c", offline=False)
    assert "HF_HUB_OFFLINE" not in online and online["HF_HOME"] == env["HF_HOME"]


def test_fetch_plan_of_the_7b_config_adds_its_drafts_start():
    """Table 6's 0.5B draft of configs/paper-7b.yaml starts from its own hub model: prefetched too; a config
    without such an entry keeps its prefetch job as it was (no new key)."""
    config = validate(yaml.safe_load((ROOT / "configs" / "paper-7b.yaml").read_text()))
    models = [i.source for i in fetch_plan(prefetch_job(config)) if i.kind == "model"]
    assert models == ["Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"]
    assert "base_models" not in prefetch_job(paper_config())
