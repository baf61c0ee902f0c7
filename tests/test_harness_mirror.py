"""The paper profile on a local mirror of the harness's data (mars.evaluation.tasks.mirror), offline: the harness's own
six task definitions load and prompt the local records, HumanEval's canonical solutions score 1.0 through the
harness task and the sandbox, and `mars eval --profile paper` runs end to end; plus the paper-scale pieces around
it (hub-id checkpoints, dtype / device, the benchmark's GSM8K prompts, IFEval's dependencies)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mars.evaluation.tasks import PAPER_FEWSHOT, PAPER_TASKS
from mars.evaluation.tasks import mirror as M
from mars.pipeline.config import ConfigError

ROOT = Path(__file__).resolve().parent.parent
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


@pytest.fixture(scope="module")
def offline(tmp_path_factory):
    """No network for the datasets library, and a throwaway datasets cache (the json loader writes Arrow files)."""
    import datasets.config

    mp = pytest.MonkeyPatch()
    for key, value in OFFLINE.items():
        mp.setenv(key, value)
    cache = tmp_path_factory.mktemp("datasets_cache")
    mp.setenv("HF_DATASETS_CACHE", str(cache))
    mp.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    mp.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    mp.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    yield cache
    mp.undo()


@pytest.fixture(scope="module")
def mirror(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("harness_mirror")
    M.write_harness_mirror(root)
    return root


@pytest.fixture(scope="module")
def harness(mirror, offline, harness_task_manager, tmp_path_factory):
    """(the harness's own task manager, one whose index has the mirror YAMLs, their overrides)."""
    from lm_eval.tasks import TaskManager

    default = harness_task_manager
    include = tmp_path_factory.mktemp("mirror_tasks")
    overrides = M.write_redirected_tasks(default, [*PAPER_TASKS.values(), "gsm8k_cot"], mirror, include)
    M.quiet_override_notices()
    return default, TaskManager(include_path=str(include)), overrides


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def first_context(task, num_fewshot: int) -> tuple[str, dict]:
    task.set_config("num_fewshot", num_fewshot)
    task.build_all_requests(limit=1, rank=0, world_size=1, apply_chat_template=False)
    return task.instances[0].args[0], task.instances[0].doc


def harness_cfg(default_tm, name: str, resolve: bool = True) -> dict:
    from lm_eval.tasks._yaml_loader import load_yaml

    return load_yaml(default_tm.task_index[name].yaml_path, resolve_func=resolve)


# ---------------------------------------------------------------------------------------------------------------
# (b) each mirrored task: the harness's own definition, its data from the local files, no network


@pytest.mark.slow
def test_every_paper_task_loads_from_the_mirror_with_the_harness_prompt(harness, mirror):
    from lm_eval.utils import apply_template

    from mars.evaluation.tasks import paper_task_spec

    default, redirected, overrides = harness
    # every subtask of the two groups is redirected, and nothing but the data source differs from the harness's
    assert len([t for t in overrides if t.startswith("bbh_cot_fewshot_")]) == 27
    assert len([t for t in overrides if t.startswith("mmlu_pro_")]) == 14
    for leaf, keys in overrides.items():
        assert keys["dataset_path"] == "json" and keys["dataset_name"] is None
        for path in keys["dataset_kwargs"]["data_files"].values():
            assert Path(path).is_file() and Path(path).is_relative_to(mirror)

    loaded = {}
    for family, name in PAPER_TASKS.items():
        spec = paper_task_spec(family, redirected, overrides) if family == "humaneval" else name
        loaded[family] = redirected.load([spec])["tasks"]

    # ifeval: the prompt is the record's prompt
    local = read_jsonl(mirror / "google/IFEval/default/train.jsonl")
    context, doc = first_context(loaded["ifeval"]["ifeval"], PAPER_FEWSHOT["ifeval"])
    assert doc["key"] == local[0]["key"] and context == local[0]["prompt"]
    assert len(loaded["ifeval"]["ifeval"].eval_docs) == len(local)

    # gsm8k_cot_zeroshot: the harness's template on the local question
    cfg = harness_cfg(default, "gsm8k_cot_zeroshot")
    local = read_jsonl(mirror / "openai/gsm8k/main/test.jsonl")
    context, doc = first_context(loaded["gsm8k"]["gsm8k_cot_zeroshot"], 0)
    assert (
        context
        == apply_template(cfg["doc_to_text"], local[0])
        == f"Q: {local[0]['question']}\nA: Let's think step by step."
    )

    # mmlu_pro: 14 subtasks, each the harness's description + its doc_to_text function on its category's record
    assert len(loaded["mmlu_pro"]) == 14
    local = read_jsonl(mirror / "TIGER-Lab/MMLU-Pro/default/test.jsonl")
    for leaf in ("mmlu_pro_biology", "mmlu_pro_computer_science", "mmlu_pro_psychology"):
        cfg = harness_cfg(default, leaf)
        category = leaf.removeprefix("mmlu_pro_").replace("_", " ")
        record = next(r for r in local if r["category"] == category)
        context, doc = first_context(loaded["mmlu_pro"][leaf], PAPER_FEWSHOT["mmlu_pro"])
        assert context == cfg["description"] + cfg["doc_to_text"](record)
        assert doc["question_id"] == record["question_id"]

    # bbh_cot_fewshot: 27 subtasks, the harness's description and 3 inline shots, then the local question
    assert len(loaded["bbh"]) == 27
    for sub in ("word_sorting", "boolean_expressions", "multistep_arithmetic_two"):
        leaf = f"bbh_cot_fewshot_{sub}"
        cfg = harness_cfg(default, leaf)
        record = read_jsonl(mirror / f"SaylorTwift/bbh/{sub}/test.jsonl")[0]
        context, doc = first_context(loaded["bbh"][leaf], PAPER_FEWSHOT["bbh"])
        assert context.startswith(cfg["description"])
        assert context.endswith(apply_template(cfg["doc_to_text"], record))
        assert all(shot["input"] in context for shot in cfg["fewshot_config"]["samples"][:3])
        assert doc["target"] == record["target"]

    # gpqa_main_cot_zeroshot: the harness's template over its (shuffled) choices of the local record
    record = read_jsonl(mirror / "Idavidrein/gpqa/gpqa_main/train.jsonl")[0]
    context, doc = first_context(loaded["gpqa"]["gpqa_main_cot_zeroshot"], 0)
    assert context.startswith(f"What is the correct answer to this question:{record['Question']}\nChoices:\n(A) ")
    answers = [record[k] for k in ("Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3")]
    assert sorted(doc["choices"]) == sorted(answers) and context.endswith("Let's think step by step: ")
    assert doc["choices"]["ABCD".index(doc["answer"][1])] == record["Correct Answer"]

    # humaneval_instruct: the harness's instruction prompt and answer prefix, over all 164 local problems
    cfg = harness_cfg(default, "humaneval_instruct", resolve=False)
    local = read_jsonl(mirror / "openai/openai_humaneval/default/test.jsonl")
    task = loaded["humaneval"]["humaneval_instruct"]
    context, doc = first_context(task, 0)
    assert len(task.eval_docs) == len(local) == 164 and doc["task_id"] == local[0]["task_id"]
    assert context.startswith(apply_template(cfg["doc_to_text"], local[0]))
    assert context.endswith(apply_template(cfg["gen_prefix"], local[0]))


def test_a_partial_mirror_is_refused_naming_the_missing_file(mirror, harness_task_manager, tmp_path):
    partial = tmp_path / "partial"
    shutil.copytree(mirror, partial)
    (partial / "SaylorTwift/bbh/navigate/test.jsonl").unlink()
    (partial / "TIGER-Lab/MMLU-Pro/default/validation.jsonl").unlink()  # the few-shot split lm-eval opens
    tm = harness_task_manager
    with pytest.raises(ConfigError, match=r"lacks 1 file\(s\): bbh_cot_fewshot_navigate: .*navigate/test.jsonl"):
        M.redirect(tm, ["bbh_cot_fewshot"], partial)
    with pytest.raises(ConfigError, match=r"lacks 14 file\(s\): mmlu_pro_biology: .*validation.jsonl"):
        M.redirect(tm, ["mmlu_pro"], partial)
    with pytest.raises(ConfigError, match="harness_data folder not found"):
        M.check_harness_data(tmp_path / "nowhere")


# ---------------------------------------------------------------------------------------------------------------
# (a) HumanEval: the canonical solutions pass through the harness task and the sandbox


class CanonicalSolutions:
    """An lm-eval LM that answers each humaneval_instruct request with the problem's canonical solution, as a model
    continuing the task's answer prefix ("Here is the completed function: ```python <prompt>") would, closed by the
    fence the task's filter cuts at. It tests the task and the scorer, not a model."""

    def __new__(cls, *args, **kwargs):
        from lm_eval.api.model import LM

        class _LM(LM):
            def generate_until(self, requests, disable_tqdm=False):
                return [req.doc["canonical_solution"] + "\n```\n" for req in requests]

            def loglikelihood(self, requests, disable_tqdm=False):
                raise NotImplementedError

            def loglikelihood_rolling(self, requests, disable_tqdm=False):
                raise NotImplementedError

        return _LM()


@pytest.mark.slow
def test_humaneval_canonical_solutions_score_one_through_the_harness_task_and_the_sandbox(harness):
    from lm_eval import simple_evaluate

    from mars.evaluation.tasks import paper_task_spec

    _, redirected, overrides = harness
    spec = paper_task_spec("humaneval", redirected, overrides)
    results = simple_evaluate(
        model=CanonicalSolutions(),
        tasks=[spec],
        task_manager=redirected,
        num_fewshot=0,
        bootstrap_iters=0,
        log_samples=True,
        confirm_run_unsafe_code=True,
    )
    samples = results["samples"]["humaneval_instruct"]
    assert len(samples) == 164
    assert results["results"]["humaneval_instruct"]["pass@1,create_test"] == 1.0
    # and the scorer is not vacuous: a wrong body fails the same problems' tests in the sandbox
    from mars.evaluation.tasks.hooks import sandboxed_pass_at_1

    doc = samples[0]["doc"]
    wrong = doc["prompt"] + "    return None\n"
    assert sandboxed_pass_at_1([doc["test"] + f"\ncheck({doc['entry_point']})"], [[wrong]])["pass@1"] == 0.0


# ---------------------------------------------------------------------------------------------------------------
# (c) mars eval --profile paper on the mirror, offline


def _env(extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(OFFLINE)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra or {})
    return env


@pytest.mark.slow
def test_mars_eval_paper_profile_runs_all_six_tasks_on_the_mirror_offline(trained_tiny, mirror, tmp_path):
    out = tmp_path / "eval" / "{family}.json"
    proc = subprocess.run(
        [sys.executable, "-m", "mars.cli", "eval", "--model", str(trained_tiny["mars"]), "--profile", "paper"]
        + ["--tasks", "paper", "--harness-data", str(mirror), "--tau", "0.9", "--limit", "2", "--batch-size", "2"]
        + ["--max-gen-toks", "8", "--device", "cpu", "--output", str(out), "--results-dir", str(tmp_path)],
        cwd=tmp_path,
        env=_env(
            {"HF_DATASETS_CACHE": str(tmp_path / "ds_cache"), "MLFLOW_TRACKING_URI": os.environ["MLFLOW_TRACKING_URI"]}
        ),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    for family, name in PAPER_TASKS.items():
        record = json.loads((tmp_path / "eval" / f"{family}.json").read_text())
        assert record["task"] == name and record["profile"] == "paper"
        assert record["eval_args"]["harness_data"] == str(mirror.resolve())
        assert record["eval_args"]["dtype"] == "float32"  # auto on the CPU
        assert record["primary_metric"] in record["metrics"], (family, sorted(record["metrics"]))
        assert record["decoding"]["tokens_per_forward"] > 0
    bbh = json.loads((tmp_path / "eval" / "bbh.json").read_text())
    assert len(bbh["subtasks"]) == 27  # every subtask, 2 (of 1-2) documents each


def test_ifeval_on_a_mirror_without_punkt_tab_is_one_clear_error(trained_tiny, mirror, tmp_path):
    from mars.evaluation.evaluate import evaluate

    bare = tmp_path / "bare"
    shutil.copytree(mirror, bare, ignore=shutil.ignore_patterns(M.NLTK_SUBDIR))
    import nltk

    saved = list(nltk.data.path)
    nltk.data.path[:] = [p for p in nltk.data.path if not str(p).startswith(str(mirror.resolve()))]
    try:
        if M.nltk_data_ready(None):
            pytest.fail("a real punkt_tab is installed on this machine; the test needs a machine without one")
        with pytest.raises(ConfigError, match="ifeval needs nltk's punkt_tab"):
            evaluate(
                model=trained_tiny["mars"],
                tasks="ifeval",
                profile="paper",
                harness_data=bare,
                output=tmp_path / "r.json",
                device="cpu",
            )
        assert not (tmp_path / "r.json").exists()
        assert M.nltk_data_ready(mirror)  # the stand-in mirror carries its (stand-in) punkt_tab
    finally:
        nltk.data.path[:] = saved


def test_ifeval_scorer_imports_offline_with_the_mirrors_nltk_data(mirror):
    """IFEval's dependencies (langdetect, immutabledict, nltk + punkt_tab) are installed: the harness's scorer
    imports without a download and scores a response."""
    assert M.nltk_data_ready(mirror)
    from lm_eval.tasks.ifeval import utils as ifeval_utils

    doc = read_jsonl(mirror / "google/IFEval/default/train.jsonl")[0]  # punctuation:no_comma
    assert ifeval_utils.process_results(doc, ["No commas here. Thanks."])["prompt_level_strict_acc"] is True
    assert ifeval_utils.process_results(doc, ["Hello, neighbour."])["prompt_level_strict_acc"] is False
    assert (mirror / "nltk_data" / "STANDIN.md").is_file()


# ---------------------------------------------------------------------------------------------------------------
# item 14: why gsm8k_cot_zeroshot, from the harness's own definitions


def test_gsm8k_cot_with_zero_shots_is_not_gsm8k_cot_zeroshot(harness, mirror):
    default, redirected, _ = harness
    question = read_jsonl(mirror / "openai/gsm8k/main/test.jsonl")[0]["question"]
    cot = redirected.load(["gsm8k_cot"])["tasks"]["gsm8k_cot"]
    zero = redirected.load(["gsm8k_cot_zeroshot"])["tasks"]["gsm8k_cot_zeroshot"]
    assert first_context(cot, 0)[0] == f"Q: {question}\nA:"  # no "Let's think step by step" cue
    assert first_context(zero, 0)[0] == f"Q: {question}\nA: Let's think step by step."
    cot_cfg, zero_cfg = harness_cfg(default, "gsm8k_cot", False), harness_cfg(default, "gsm8k_cot_zeroshot", False)
    assert cot_cfg["num_fewshot"] == 8 and zero_cfg["num_fewshot"] == 0
    # the answer is extracted the same way (strict "The answer is N." / flexible last number) ...
    assert cot_cfg["filter_list"] == zero_cfg["filter_list"]
    # ... but the reference differs: the number after "####" vs the whole solution, cut by a regex of the metric
    assert "split('####')" in cot_cfg["doc_to_target"] and zero_cfg["doc_to_target"] == "{{answer}}"
    assert "(?s).*#### " in zero_cfg["metric_list"][0]["regexes_to_ignore"]


# ---------------------------------------------------------------------------------------------------------------
# item 2: the "Base" row is a hub model


def fake_hub_cache(checkpoint: Path, cache: Path, repo: str) -> Path:
    """A local hub cache holding ``repo`` (what a login node's prefetch leaves): refs/main -> one snapshot."""
    org, name = repo.split("/")
    sha = "0123456789abcdef0123456789abcdef01234567"
    snapshot = cache / f"models--{org}--{name}" / "snapshots" / sha
    shutil.copytree(checkpoint, snapshot, ignore=shutil.ignore_patterns("run_config.json", "checkpoint-*"))
    (cache / f"models--{org}--{name}" / "refs").mkdir()
    (cache / f"models--{org}--{name}" / "refs" / "main").write_text(sha)
    return snapshot


@pytest.mark.slow
def test_base_row_hub_id_and_snapshot_folder_are_evaluated(trained_tiny, tmp_path):
    cache = tmp_path / "hub"
    snapshot = fake_hub_cache(trained_tiny["ar"], cache, "mars-test/tiny-base")
    for model in ("mars-test/tiny-base", str(snapshot)):
        out = tmp_path / "out.json"
        proc = subprocess.run(
            [sys.executable, "-m", "mars.cli", "eval", "--model", model, "--profile", "tiny"]
            + ["--tasks", "tiny_gsm8k", "--data", str(trained_tiny["world"] / "data"), "--method", "ar"]
            + ["--tau", "1.0", "--limit", "1", "--max-gen-toks", "4", "--output", str(out)]
            + ["--results-dir", str(tmp_path)],
            cwd=tmp_path,
            env=_env({"HF_HUB_CACHE": str(cache), "MLFLOW_TRACKING_URI": os.environ["MLFLOW_TRACKING_URI"]}),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        record = json.loads(out.read_text())
        assert record["model"]["path"] == (model if model.startswith("mars-test") else str(snapshot.resolve()))
        assert record["model_args"]["method"] == "ar" and record["model"]["trained_block_size"] is None
        out.unlink()
    # a hub id that is not in the local cache, offline: one error line
    proc = subprocess.run(
        [sys.executable, "-m", "mars.cli", "eval", "--model", "mars-test/absent", "--profile", "tiny"]
        + [
            "--tasks",
            "tiny_gsm8k",
            "--data",
            str(trained_tiny["world"] / "data"),
            "--output",
            str(tmp_path / "x.json"),
        ],
        cwd=tmp_path,
        env=_env({"HF_HUB_CACHE": str(cache)}),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: --model mars-test/absent: neither a folder nor a hub model in the local cache (offline)"
    )


def test_mask_token_of_the_world_serves_a_hub_model_without_one(trained_tiny):
    from mars.evaluation.lm_eval_model import MARSLM

    lm = MARSLM(pretrained=str(trained_tiny["ar"]), method="ar", device="cpu", batch_size=1)
    mask_id = lm.tokenizer.mask_token_id
    lm.tokenizer.mask_token = None  # (as a hub tokenizer: no mask token)
    token = lm.tokenizer.convert_ids_to_tokens(mask_id)
    lm2 = MARSLM(pretrained=str(trained_tiny["ar"]), method="ar", device="cpu", batch_size=1, mask_token=token)
    assert lm2.mask_token_id == mask_id


# ---------------------------------------------------------------------------------------------------------------
# item 9: device and dtype; the paper-scale benchmark's GSM8K prompts


def test_dtype_choice_and_a_bf16_model_on_the_cpu_still_generates(trained_tiny):
    from mars.decoding.generation import generate_text, load_model, resolve_device, resolve_dtype

    assert resolve_dtype("auto", "cpu") == torch.float32
    assert resolve_dtype("auto", "cuda") == torch.bfloat16
    assert resolve_dtype(None, "cuda:1") == torch.bfloat16
    assert resolve_dtype("float16", "cpu") == torch.float16
    assert resolve_device(None).type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ConfigError, match="dtype must be"):
        resolve_dtype("fp8", "cpu")
    model, tokenizer = load_model(trained_tiny["mars"], dtype="bfloat16", device="cpu")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    out = generate_text(model, tokenizer, ["What is 2 plus 3?"], method="mars", block_size=4, tau=0.9, max_new_tokens=6)
    assert len(out[0].token_ids) > 0
    model, _ = load_model(trained_tiny["mars"])  # defaults: auto on this machine
    assert next(model.parameters()).dtype == resolve_dtype("auto", None)


def test_lm_eval_model_takes_the_dtype_and_defaults_to_auto(trained_tiny):
    from lm_eval.api.instance import Instance

    from mars.evaluation.lm_eval_model import MARSLM

    lm = MARSLM(pretrained=str(trained_tiny["mars"]), tau=0.9, device="cpu", dtype="bfloat16", batch_size=1)
    assert lm.model.dtype == torch.bfloat16 and lm.model_args()["dtype"] == "torch.bfloat16"
    request = Instance("generate_until", {}, ("What is 2 plus 3?", {"until": ["<|im_end|>"], "max_gen_toks": 6}), 0)
    request.task_name = "t"
    assert isinstance(lm.generate_until([request])[0], str)
    assert MARSLM(pretrained=str(trained_tiny["mars"]), device="cpu", batch_size=1).model.dtype == torch.float32


def test_paper_bench_prompts_are_the_harness_gsm8k_questions(mirror, trained_tiny, tmp_path):
    from mars.bench.wallclock import run_bench

    questions = [r["question"] for r in read_jsonl(mirror / "openai/gsm8k/main/test.jsonl")]
    assert M.gsm8k_bench_prompts(mirror, 3) == [f"Q: {q}\nA: Let's think step by step." for q in questions[:3]]
    rows = run_bench(
        str(trained_tiny["mars"]),
        None,
        str(tmp_path / "bench"),
        batch_sizes=[2],
        num_prompts=2,
        tau=0.9,
        cache_block_sizes=[4],
        reps=1,
        max_new_tokens=4,
        prompts="gsm8k",
        harness_data=str(mirror),
        results_dir=str(tmp_path),
    )
    assert {r["setting"] for r in rows} >= {"ar_hf_kv", "mars_cursor"}
    meta = json.loads((tmp_path / "bench" / "bench.json").read_text())
    assert meta["num_prompts"] == 2 and meta["prompts"].startswith("gsm8k test") and meta["dtype"] == "float32"
    with pytest.raises(ConfigError, match="no GSM8K test split"):
        M.gsm8k_bench_prompts(tmp_path, 1)
