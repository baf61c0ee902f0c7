"""mars eval: the tiny lm-eval tasks' metric wiring, hostile code through the humaneval path, the CLI, the paper
profile.

The metric tests drive hand-written completions through the real harness path (``simple_evaluate`` with a
stand-in LM that answers from a table): ``process_results`` of the generated YAMLs, the harness's per-task
aggregation and the group aggregation.  mars.world.tasks' own scoring rules are tested in tests/world.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mars.evaluation.tasks import PAPER_TASKS, resolve_tasks, write_task_dir

# ---------------------------------------------------------------------------------------------------------------
# helpers: a hand-written data folder and a table-driven LM


def _rec(family: str, i: int, prompt: str, target, split: str = "test", response: str = "gold") -> dict:
    return {
        "family": family,
        "id": f"{family}/{split}/{i:05d}",
        "prompt": prompt,
        "response": response,
        "target": json.dumps(target, sort_keys=True),
    }


def _write_data(folder: Path, test: list[dict], train: list[dict] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, records in (("test", test), ("train", train or [])):
        with open(folder / f"{name}.jsonl", "w") as fh:
            for r in records:
                fh.write(json.dumps(r) + "\n")
    return folder


class TableLM:
    """An lm-eval LM answering each generate_until request from {prompt: completion} (the context ends with it)."""

    def __new__(cls, table: dict[str, str]):
        from lm_eval.api.model import LM

        class _Table(LM):
            def __init__(self):
                super().__init__()
                self.table = table
                self.contexts: list[str] = []

            def generate_until(self, requests, disable_tqdm=False):
                out = []
                for req in requests:
                    ctx = req.args[0]
                    self.contexts.append(ctx)
                    hits = [c for p, c in self.table.items() if ctx.endswith(p)]
                    assert len(hits) == 1, ctx
                    out.append(hits[0])
                return out

            def loglikelihood(self, requests, disable_tqdm=False):
                raise NotImplementedError

            def loglikelihood_rolling(self, requests, disable_tqdm=False):
                raise NotImplementedError

        return _Table()


def _run(task_dir: Path, tasks: list[str], lm) -> dict:
    import lm_eval
    from lm_eval.tasks import TaskManager

    tm = TaskManager(include_path=str(task_dir), include_defaults=False)
    return lm_eval.simple_evaluate(
        model=lm, tasks=tasks, task_manager=tm, log_samples=True, confirm_run_unsafe_code=True, bootstrap_iters=0
    )


def _sample_metrics(results: dict, task: str) -> list[dict]:
    out = []
    for s in sorted(results["samples"][task], key=lambda s: s["doc_id"]):
        out.append({m: s[m] for m in s["metrics"]})
    return out


ADD_THREE_TEST = (
    "def check(candidate):\n    assert candidate(1) == 4\n    assert candidate(-3) == 0\n\n\ncheck(add_three)\n"
)
ADD_THREE = {"entry_point": "add_three", "test": ADD_THREE_TEST}
GOOD_CODE = "def add_three(x):\n    return x + 3\n"


# ---------------------------------------------------------------------------------------------------------------
# metric wiring through process_results and the harness's aggregation


def _metric_cases():
    """(test records, train records, {prompt: completion}) with hand-written right and wrong answers."""
    test, train, table = [], [], {}

    def add(family, prompt, target, completion, split="test"):
        rows = test if split == "test" else train
        rows.append(_rec(family, len(rows), prompt, target, split))
        table[prompt] = completion

    low = {"instruction_id_list": ["change_case:english_lowercase"], "kwargs": [{}]}
    caps_kw = {
        "instruction_id_list": ["change_case:english_capital", "keywords:existence"],
        "kwargs": [{}, {"keywords": ["warm"]}],
    }
    end_first = {
        "instruction_id_list": ["startend:end_checker", "startend:first_word"],
        "kwargs": [{"end_phrase": "That is all."}, {"first_word": "Well"}],
    }
    add("ifeval", "Write about cats. Use only lowercase letters.", low, "cats are soft.\n\n")  # 1/1 (whitespace)
    add(
        "ifeval", "Tell me about rain. Use only capital letters. Include the word warm.", caps_kw, "Rain is wet."
    )  # 0/2
    add(
        "ifeval",
        'Describe the sea. End with the exact phrase "That is all." Start with "Well".',
        end_first,
        "Well, the sea is big. That is it.",
    )  # first word yes, end no: 1/2

    for i, (expr, gold) in enumerate([("True or False", "True"), ("not True", "False"), ("False or False", "False")]):
        train.append(
            {
                **_rec("bbh", i, f"Evaluate: {expr}", {"subtask": "boolean_expressions", "answer": gold}, "train"),
                "response": f"Let's think step by step. So the answer is {gold}.",
            }
        )
    for i, (words, gold) in enumerate([("b a", "a b"), ("d c", "c d"), ("f e", "e f")]):
        train.append(
            {
                **_rec("bbh", 3 + i, f"Sort: {words}", {"subtask": "word_sorting", "answer": gold}, "train"),
                "response": f"Let's think step by step. So the answer is {gold}.",
            }
        )
    add(
        "bbh",
        "Evaluate the Boolean expression: True and True",
        {"subtask": "boolean_expressions", "answer": "True"},
        "Let's think step by step. True and True = True. So the answer is True.",
    )  # 1
    add(
        "bbh",
        "Evaluate the Boolean expression: not not False",
        {"subtask": "boolean_expressions", "answer": "False"},
        "Let's think step by step. so the answer is false",
    )  # 1: case, no final period
    add(
        "bbh",
        "Sort the following words alphabetically: List: log rat quiz",
        {"subtask": "word_sorting", "answer": "log quiz rat"},
        "So the answer is log rat quiz.",
    )  # 0

    add("mmlu_pro", "Q1 (mmlu) options A-J", {"answer": "I"}, "The zorp carries a key. The answer is (I).")  # 1
    add("mmlu_pro", "Q2 (mmlu) options A-J", {"answer": "C"}, "answer: c")  # 1: lower-case letter
    add("mmlu_pro", "Q3 (mmlu) options A-J", {"answer": "B"}, "The answer is (J)")  # 0
    add("mmlu_pro", "Q4 (mmlu) options A-J", {"answer": "B"}, "It is B or C, I think.")  # 0: nothing extracted

    add("gpqa", "Q1 (gpqa) choices A-D", {"answer": "A"}, "The friend is the blick. The answer is (A).")  # 1
    add("gpqa", "Q2 (gpqa) choices A-D", {"answer": "A"}, "The answer is (E).")  # 0: not a gpqa letter

    add("gsm8k", "G1: 3 plus 4?", {"answer": "7"}, "3 + 4 = 7.\n#### 7")  # strict 1, flexible 1
    add("gsm8k", "G2: a thousand?", {"answer": "1000"}, "The answer is 1,000.")  # strict 0, flexible 1
    add("gsm8k", "G3: twelve?", {"answer": "12"}, "#### 12\nActually it is 13")  # strict 1, flexible 0

    add("humaneval", "Write add_three (fenced)", ADD_THREE, f"```python\n{GOOD_CODE}```")  # 1
    add("humaneval", "Write add_three (bare)", ADD_THREE, GOOD_CODE)  # 1: no fence, the whole text is the code
    add("humaneval", "Write add_three (wrong)", ADD_THREE, "```python\ndef add_three(x):\n    return x + 2\n```")  # 0
    return test, train, table


@pytest.fixture(scope="module")
def metric_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("metric_wiring")
    test, train, table = _metric_cases()
    data = _write_data(root / "data", test, train)
    task_dir = root / "tasks"
    written = write_task_dir(data, task_dir)
    tasks = ["tiny_ifeval", "tiny_bbh", "tiny_mmlu_pro", "tiny_gpqa", "tiny_gsm8k", "tiny_humaneval"]
    lm = TableLM(table)
    return {"results": _run(task_dir, tasks, lm), "written": written, "lm": lm}


def test_generated_tasks(metric_run):
    written = metric_run["written"]
    assert written["tiny_bbh"] == ["tiny_bbh_boolean_expressions", "tiny_bbh_word_sorting"]  # subtasks with test docs
    assert set(written) == {
        "tiny",
        "tiny_ifeval",
        "tiny_bbh",
        "tiny_mmlu_pro",
        "tiny_gpqa",
        "tiny_gsm8k",
        "tiny_humaneval",
    }


def test_ifeval_prompt_and_instruction_level(metric_run):
    res = metric_run["results"]
    assert _sample_metrics(res, "tiny_ifeval") == [
        {"prompt_level_strict_acc": 1.0, "inst_level_strict_acc": [True]},
        {"prompt_level_strict_acc": 0.0, "inst_level_strict_acc": [False, False]},
        {"prompt_level_strict_acc": 0.0, "inst_level_strict_acc": [False, True]},  # in instruction order
    ]
    r = res["results"]["tiny_ifeval"]
    assert r["prompt_level_strict_acc,none"] == pytest.approx(1 / 3)
    # the true mean over the 5 instructions (2 passed), not the mean of per-prompt means (0.5)
    assert r["inst_level_strict_acc,none"] == pytest.approx(2 / 5)


def test_bbh_exact_match_and_group_weighting(metric_run):
    res = metric_run["results"]
    assert _sample_metrics(res, "tiny_bbh_boolean_expressions") == [{"exact_match": 1.0}, {"exact_match": 1.0}]
    assert _sample_metrics(res, "tiny_bbh_word_sorting") == [{"exact_match": 0.0}]
    group = res["results"].get("tiny_bbh") or res["groups"]["tiny_bbh"]
    assert group["exact_match,none"] == pytest.approx(2 / 3)  # weighted by size (unweighted: 0.5)


def test_bbh_shots_from_train_of_the_same_subtask(metric_run):
    from mars.evaluation.tasks import FEWSHOT

    assert FEWSHOT["bbh"] == 1  # tiny BBH is 1-shot (the paper's bbh_cot_fewshot is 3-shot, checked below)
    contexts = [c for c in metric_run["lm"].contexts if "Evaluate the Boolean expression: True and True" in c]
    assert len(contexts) == 1
    ctx = contexts[0]
    assert "Evaluate: True or False" in ctx  # the subtask's first train record (first_n)
    for expr in ("not True", "False or False"):  # its 2nd and 3rd: not shots at 1-shot
        assert f"Evaluate: {expr}" not in ctx
    assert "Sort: " not in ctx  # no shot of another subtask
    assert ctx.index("Evaluate: True or False") < ctx.index("Evaluate the Boolean")


def test_multiple_choice_and_gsm8k(metric_run):
    res = metric_run["results"]
    assert [m["exact_match"] for m in _sample_metrics(res, "tiny_mmlu_pro")] == [1.0, 1.0, 0.0, 0.0]
    assert res["results"]["tiny_mmlu_pro"]["exact_match,none"] == pytest.approx(0.5)
    assert [m["exact_match"] for m in _sample_metrics(res, "tiny_gpqa")] == [1.0, 0.0]
    assert _sample_metrics(res, "tiny_gsm8k") == [
        {"exact_match": 1.0, "exact_match_flexible": 1.0},
        {"exact_match": 0.0, "exact_match_flexible": 1.0},
        {"exact_match": 1.0, "exact_match_flexible": 0.0},
    ]
    r = res["results"]["tiny_gsm8k"]
    assert r["exact_match,none"] == pytest.approx(2 / 3) and r["exact_match_flexible,none"] == pytest.approx(2 / 3)


def test_humaneval_pass_at_1(metric_run):
    res = metric_run["results"]
    assert _sample_metrics(res, "tiny_humaneval") == [{"pass@1": 1.0}, {"pass@1": 1.0}, {"pass@1": 0.0}]
    assert res["results"]["tiny_humaneval"]["pass@1,none"] == pytest.approx(2 / 3)


def test_hooks_on_a_single_doc():
    """process_results called directly, as the harness calls it: (doc, [completion])."""
    from mars.evaluation.tasks import hooks
    from mars.world.tasks.ifeval import agg_inst_level_acc

    doc = _rec("gsm8k", 0, "p", {"answer": "42"})
    assert hooks.process_results(doc, ["so #### 42"]) == {"exact_match": 1.0, "exact_match_flexible": 1.0}
    assert hooks.process_results(doc, [""]) == {"exact_match": 0.0, "exact_match_flexible": 0.0}
    assert agg_inst_level_acc([[True], [False, False], [True, False]]) == pytest.approx(2 / 5)


# ---------------------------------------------------------------------------------------------------------------
# hostile generated code through the tiny_humaneval scoring path


def test_hostile_code_is_scored_as_failure(tmp_path, monkeypatch):
    outside = tmp_path / "outside"
    outside.mkdir()
    keep = outside / "keep.txt"
    keep.write_text("original")
    created = outside / "created.txt"
    secret = "s3cr3t-value-for-the-sandbox-test"
    monkeypatch.setenv("MARS_EVAL_TEST_SECRET", secret)
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.setblocking(False)
    port = server.getsockname()[1]

    # every hostile program also defines a correct add_three: it could only pass if the attack succeeded
    # (or were ignored), so a pass would be visible
    hostile = {
        "infinite loop": "def add_three(x):\n    while True:\n        pass\n",
        "fork bomb": "import os\nwhile True:\n    os.fork()\n" + GOOD_CODE,
        "20 GB allocation": "big = bytearray(20 * 1024 ** 3)\n" + GOOD_CODE,
        "write outside": f"open({str(created)!r}, 'w').write('pwned')\n" + GOOD_CODE,
        "delete outside": f"import os\nos.remove({str(keep)!r})\n" + GOOD_CODE,
        "socket": f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
        f"s.sendall(b'leak')\n" + GOOD_CODE,
        "env secret": "import os\nassert os.environ.get('MARS_EVAL_TEST_SECRET') == " + repr(secret) + "\n" + GOOD_CODE,
        "parent environ": "import os\nassert " + repr(secret) + " in open(f'/proc/{os.getppid()}/environ')."
        "read()\n" + GOOD_CODE,
    }
    test, table = [], {}
    control = "Write add_three (control)"
    test.append(_rec("humaneval", 0, control, ADD_THREE))
    table[control] = f"```python\n{GOOD_CODE}```"
    for i, (name, code) in enumerate(hostile.items(), start=1):
        prompt = f"Write add_three ({name})"
        test.append(_rec("humaneval", i, prompt, ADD_THREE))
        table[prompt] = f"```python\n{code}```"
    data = _write_data(tmp_path / "data", test)
    write_task_dir(data, tmp_path / "tasks", families=("humaneval",))

    start = time.monotonic()
    res = _run(tmp_path / "tasks", ["tiny_humaneval"], TableLM(table))
    elapsed = time.monotonic() - start

    scores = [m["pass@1"] for m in _sample_metrics(res, "tiny_humaneval")]
    assert scores[0] == 1.0  # the control passes: the failures below are not a broken scorer
    assert dict(zip(hostile, scores[1:])) == {name: 0.0 for name in hostile}
    assert res["results"]["tiny_humaneval"]["pass@1,none"] == pytest.approx(1 / (1 + len(hostile)))
    assert elapsed < 90  # finished (the infinite loop is cut by the sandbox's timeout)
    assert keep.read_text() == "original" and not created.exists()
    assert sorted(p.name for p in outside.iterdir()) == ["keep.txt"]
    try:
        conn, _ = server.accept()
        conn.close()
        connected = True
    except BlockingIOError:
        connected = False
    server.close()
    assert not connected
    from mars.evaluation import sandbox

    if hasattr(sandbox, "sandbox_processes"):
        assert sandbox.sandbox_processes() == []  # nothing left running (fork bomb included)


# ---------------------------------------------------------------------------------------------------------------
# mars eval end to end


RESULT_KEYS = {
    "schema_version",
    "kind",
    "task",
    "family",
    "profile",
    "created",
    "model",
    "tau",
    "model_args",
    "eval_args",
    "primary_metric",
    "metrics",
    "subtasks",
    "decoding",
    "n_samples",
    "n_shot",
    "versions",
    "task_configs",
    "lm_eval_version",
    "git_commit",
    "mlflow",
    "machine",
    "samples",
}
SAMPLE_KEYS = {
    "task",
    "doc_id",
    "id",
    "prompt",
    "generation",
    "filtered",
    "target",
    "reference",
    "filter",
    "metrics",
    "generated_tokens",
    "forwards",
    "tokens_per_forward",
    "chunks",
    "token_ids",
    "prompt_tokens",
    "truncated",
}


def _env() -> dict:
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env["TOKENIZERS_PARALLELISM"] = "false"
    return env


def test_cli_end_to_end_from_another_cwd(trained_tiny, tmp_path):
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    data = os.path.relpath(trained_tiny["world"] / "data", cwd)  # relative to the new cwd: resolved up front
    model = trained_tiny["mars"]
    out = tmp_path / "results" / "{task}" / "tau0.9.json"
    cmd = [
        sys.executable,
        "-X",
        "importtime",  # (stderr: every module imported, checked below)
        "-m",
        "mars.cli",
        "eval",
        "--model",
        str(model),
        "--tasks",
        "tiny_gsm8k,tiny_mmlu_pro",
        "--profile",
        "tiny",
        "--data",
        data,
        "--tau",
        "0.9",
        "--block-size",
        "4",
        "--cache",
        "cursor",
        "--metric",
        "probability",
        "--method",
        "mars",
        "--limit",
        "2",
        "--batch-size",
        "4",
        "--max-gen-toks",
        "24",
        "--output",
        str(out),
        "--experiment",
        "eval-test",
        "--tag",
        "suite=pytest",
    ]
    proc = subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert [s["task"] for s in summary] == ["tiny_gsm8k", "tiny_mmlu_pro"]
    # an evaluation runs none of the code its resume key leaves out (mars.pipeline.tracking.source_digest)
    from mars.pipeline.tracking import NOT_EVALUATION_CODE

    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time")}
    assert "mars.evaluation.evaluate" in imported and "mars.decoding.engine" in imported
    assert not {m for m in imported if m.split(".")[:2] in [["mars", sub] for sub in NOT_EVALUATION_CODE]}

    run_config = json.loads((model / "run_config.json").read_text())
    records = {}
    for task in ("tiny_gsm8k", "tiny_mmlu_pro"):
        path = tmp_path / "results" / task / "tau0.9.json"
        r = json.loads(path.read_text())
        records[task] = r
        assert set(r) == RESULT_KEYS
        assert r["task"] == task and r["profile"] == "tiny" and r["tau"] == 0.9
        assert r["model"]["path"] == str(model.resolve())
        assert r["model"]["trained_mlflow_run_id"] == run_config.get("mlflow_run_id")
        assert r["model_args"]["tau"] == 0.9 and r["model_args"]["block_size"] == 4
        assert r["model_args"]["method"] == "mars" and r["model_args"]["cache"] == "cursor"
        assert r["eval_args"]["limit"] == 2 and r["eval_args"]["max_gen_toks"] == 24
        assert r["primary_metric"] in r["metrics"]
        for m in r["metrics"].values():
            assert set(m) == {"value", "stderr"} and 0.0 <= m["value"] <= 1.0
        d = r["decoding"]
        assert d["requests"] == 2 and d["forwards"] > 0
        assert d["tokens_per_forward"] == pytest.approx(d["generated_tokens"] / d["forwards"])
        assert r["versions"][task] == 1.0
        assert len(r["samples"]) == 2
        for s in r["samples"]:
            assert set(s) == SAMPLE_KEYS
            assert s["prompt"].startswith("<|im_start|>user\n") and s["prompt"].endswith("<|im_start|>assistant\n")
            assert s["generated_tokens"] <= 24 and isinstance(s["generation"], str)
            assert (
                len(s["token_ids"]) == s["generated_tokens"] == sum(s["chunks"]) and len(s["chunks"]) == s["forwards"]
            )
        assert sum(s["generated_tokens"] for s in r["samples"]) == d["generated_tokens"]
        assert sum(s["forwards"] for s in r["samples"]) == d["forwards"]
        assert not list(path.parent.glob("*.tmp"))
    assert set(records["tiny_gsm8k"]["metrics"]) == {"exact_match", "exact_match_flexible"}

    import mlflow

    client = mlflow.tracking.MlflowClient(tracking_uri=os.environ["MLFLOW_TRACKING_URI"])
    exp = client.get_experiment_by_name("eval-test")
    runs = {r.info.run_id: r for r in client.search_runs([exp.experiment_id])}
    for task, r in records.items():
        run = runs[r["mlflow"]["run_id"]]
        assert run.info.status == "FINISHED"
        tags = run.data.tags
        assert tags["kind"] == "eval" and tags["task"] == task and tags["tau"] == "0.9"
        assert tags["model_path"] == str(model.resolve()) and tags["suite"] == "pytest"
        if run_config.get("mlflow_run_id"):
            assert tags["trained_run_id"] == run_config["mlflow_run_id"]
        assert run.data.metrics["tokens_per_forward"] == pytest.approx(r["decoding"]["tokens_per_forward"])


@pytest.fixture(scope="module")
def bad_input_world(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad_inputs")
    data = _write_data(root / "data", [_rec("gsm8k", 0, "p", {"answer": "1"})])
    ckpt = root / "ckpt"
    ckpt.mkdir()
    # never loaded: every bad input is refused before the model loads (its window: a MARS B=4 checkpoint)
    (ckpt / "config.json").write_text(json.dumps({"mars": {"block_size": 4}}))
    return root, data, ckpt


@pytest.mark.parametrize(
    "case",
    [
        "missing checkpoint",
        "not a checkpoint",
        "unknown task",
        "tau too big",
        "tau zero",
        "missing data",
        "data without test.jsonl",
        "family without records",
        "bad tag",
        "bad limit",
        "output not json",
    ],
)
def test_bad_inputs_exit_2_with_one_error_line(case, bad_input_world, capsys):
    from mars.cli import main

    root, data, ckpt = bad_input_world
    out = root / f"out-{case.replace(' ', '_')}.json"
    args = {"--model": str(ckpt), "--tasks": "tiny_gsm8k", "--data": str(data), "--tau": "0.9", "--output": str(out)}
    extra: list[str] = []
    if case == "missing checkpoint":
        args["--model"] = str(root / "nope")
    elif case == "not a checkpoint":
        args["--model"] = str(data)
    elif case == "unknown task":
        args["--tasks"] = "tiny_gsm8k,tiny_nonsense"
    elif case == "tau too big":
        args["--tau"] = "1.5"
    elif case == "tau zero":
        args["--tau"] = "0"
    elif case == "missing data":
        args["--data"] = str(root / "no_data")
    elif case == "data without test.jsonl":
        args["--data"] = str(ckpt)
    elif case == "family without records":
        args["--tasks"] = "tiny_humaneval"
    elif case == "bad tag":
        extra = ["--tag", "novalue"]
    elif case == "bad limit":
        extra = ["--limit", "0"]
    elif case == "output not json":
        out = root / "out.txt"
        args["--output"] = str(out)
    argv = ["eval"] + [x for kv in args.items() for x in kv] + extra
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert not out.exists()


def test_bad_input_subprocess_exit_status(tmp_path):
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mars.cli",
            "eval",
            "--model",
            str(tmp_path / "missing"),
            "--tasks",
            "tiny_gsm8k",
            "--data",
            str(tmp_path),
            "--output",
            str(out),
        ],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines == [f"error: --model {tmp_path / 'missing'}: no such checkpoint folder"]
    assert not out.exists()


def test_output_naming():
    from mars.evaluation.evaluate import output_paths
    from mars.pipeline.config import ConfigError

    one = output_paths("r/x.json", ["tiny_gsm8k"])
    assert one == {"tiny_gsm8k": Path("r/x.json").resolve()}
    two = output_paths("r/x.json", ["tiny_gsm8k", "tiny_bbh"])
    assert two["tiny_bbh"] == Path("r/x.tiny_bbh.json").resolve()
    templ = output_paths("r/{task}/t.json", ["tiny_gsm8k", "tiny_bbh"])
    assert templ["tiny_gsm8k"] == Path("r/tiny_gsm8k/t.json").resolve()
    with pytest.raises(ConfigError):
        output_paths("r/x.csv", ["tiny_gsm8k"])


# ---------------------------------------------------------------------------------------------------------------
# the paper profile


def test_paper_profile_names_known_to_the_harness(harness_task_manager):
    from mars.evaluation.tasks import PAPER_FEWSHOT, paper_task_spec
    from mars.evaluation.tasks.hooks import sandboxed_pass_at_1

    assert set(PAPER_TASKS) == {"ifeval", "bbh", "mmlu_pro", "gpqa", "gsm8k", "humaneval"}
    tm = harness_task_manager
    for family, name in PAPER_TASKS.items():
        assert name in tm.all_tasks, name
    assert PAPER_TASKS["bbh"] in tm.all_groups and PAPER_TASKS["mmlu_pro"] in tm.all_groups
    index = tm.task_index
    from lm_eval.tasks._yaml_loader import load_yaml

    # the shot counts the paper uses: bbh 3-shot CoT (the group's subtasks are 3-shot), gsm8k / gpqa 0-shot
    bbh_leaf = load_yaml(index["bbh_cot_fewshot_word_sorting"].yaml_path, resolve_func=False)
    assert bbh_leaf["num_fewshot"] == 3 and PAPER_FEWSHOT["bbh"] == 3
    assert load_yaml(index["gsm8k_cot_zeroshot"].yaml_path, resolve_func=False)["num_fewshot"] == 0
    assert load_yaml(index["gpqa_main_cot_zeroshot"].yaml_path, resolve_func=False)["num_fewshot"] == 0
    assert PAPER_FEWSHOT["mmlu_pro"] == 0  # 5-shot in the harness, 0-shot in the paper
    # humaneval_instruct is scored through the sandbox, not the harness's unsandboxed code_eval
    spec = paper_task_spec("humaneval", tm)
    assert spec["task"] == "humaneval_instruct" and spec["metric_list"][0]["metric"] is sandboxed_pass_at_1
    assert resolve_tasks(["paper"], "paper") == [(v, k) for k, v in PAPER_TASKS.items()]
    assert resolve_tasks(["gsm8k"], "paper") == [("gsm8k_cot_zeroshot", "gsm8k")]


def test_the_paper_task_folders_hold_the_harness_own_definitions_of_every_paper_task(harness_task_manager):
    """paper_task_manager indexes only PAPER_TASK_DIRS: every paper task and each of its subtasks must resolve to
    the same YAML file (and kind) as in the harness's full index, and each group to the same subtasks."""
    from mars.evaluation.tasks import paper_task_manager
    from mars.evaluation.tasks.mirror import harness_leaves

    full, narrow = harness_task_manager, paper_task_manager()
    for name in PAPER_TASKS.values():
        leaves = harness_leaves(full, name)
        assert harness_leaves(narrow, name) == leaves
        assert len(leaves) == {"bbh_cot_fewshot": 27, "mmlu_pro": 14}.get(name, 1)
        for task in {name, *leaves}:
            assert narrow.task_index[task].yaml_path == full.task_index[task].yaml_path, task
            assert narrow.task_index[task].kind == full.task_index[task].kind, task


def test_failure_leaves_no_partial_file(trained_tiny, tmp_path, monkeypatch):
    """A failure while the result is being written leaves no file (nor temporary file) and a FAILED MLflow run."""
    import mlflow

    import mars.evaluation.evaluate as ev
    import mars.fileio

    def broken_fsync(fd):  # the record is half on disk when the disk fills up
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(mars.fileio.os, "fsync", broken_fsync)
    out = tmp_path / "r.json"
    with pytest.raises(OSError, match="simulated"):
        ev.evaluate(
            model=trained_tiny["mars"],
            tasks="tiny_mmlu_pro",
            data=trained_tiny["world"] / "data",
            tau=1.0,
            limit=1,
            batch_size=1,
            max_gen_toks=4,
            output=out,
            experiment="eval-failure",
            device="cpu",
        )
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []
    client = mlflow.tracking.MlflowClient(tracking_uri=os.environ["MLFLOW_TRACKING_URI"])
    runs = client.search_runs([client.get_experiment_by_name("eval-failure").experiment_id])
    assert [r.info.status for r in runs] == ["FAILED"]
    assert runs[0].data.tags["task"] == "tiny_mmlu_pro"


def test_a_job_stopped_part_way_resumes_its_finished_tasks(trained_tiny, tmp_path, monkeypatch):
    """Killed in its second task, a two-task job rerun (its files removed first, as Snakemake does) restores the first
    task's record instead of evaluating it again; a finished job leaves nothing to resume; a job of other settings
    or other code or data evaluates every task again."""
    import lm_eval

    import mars.evaluation.evaluate as ev

    evaluated = []
    real = lm_eval.simple_evaluate

    def counting(*args, **kwargs):
        evaluated.append(kwargs["tasks"][0])
        if kill_at and len(evaluated) == kill_at:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(lm_eval, "simple_evaluate", counting)
    run = dict(
        model=trained_tiny["mars"],
        tasks="tiny_mmlu_pro,tiny_gpqa",
        data=trained_tiny["world"] / "data",
        limit=2,
        batch_size=2,
        max_gen_toks=4,
        output=tmp_path / "{family}.json",
        experiment="eval-resume",
        device="cpu",
    )
    kill_at = 2
    with pytest.raises(KeyboardInterrupt):
        ev.evaluate(tau=1.0, **run)
    first = json.loads((tmp_path / "mmlu_pro.json").read_text())
    assert not (tmp_path / "gpqa.json").exists() and (tmp_path / ".mars_eval_done" / "mmlu_pro.json").is_file()
    (tmp_path / "mmlu_pro.json").unlink()
    kill_at = 0
    evaluated.clear()
    out = ev.evaluate(tau=1.0, **run)
    assert evaluated == ["tiny_gpqa"]  # the first task restored, not evaluated again
    assert json.loads((tmp_path / "mmlu_pro.json").read_text()) == first == out[0][1]
    assert not (tmp_path / ".mars_eval_done").exists()

    def evaluated_after_a_stop(change, tau=1.0) -> list[str]:
        """Stop the job in its second task, rerun it at ``tau`` under ``change``: the tasks evaluated again."""
        nonlocal kill_at
        kill_at = 2
        evaluated.clear()
        with pytest.raises(KeyboardInterrupt):
            ev.evaluate(tau=1.0, overwrite=True, **run)
        kill_at = 0
        evaluated.clear()
        with change():
            ev.evaluate(tau=tau, overwrite=True, **run)
        return list(evaluated)

    @contextlib.contextmanager
    def other_code():  # (the package's files: mars.pipeline.tracking.source_digest)
        with monkeypatch.context() as patch:
            patch.setattr("mars.pipeline.tracking.source_digest", lambda: "other-code")
            yield

    @contextlib.contextmanager
    def other_data():  # the test split rewritten in place: here, its modification time
        test_split = trained_tiny["world"] / "data" / "test.jsonl"
        stat = test_split.stat()
        os.utime(test_split, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
        try:
            yield
        finally:
            os.utime(test_split, ns=(stat.st_atime_ns, stat.st_mtime_ns))

    # kept records of other settings, other code or other data are never restored
    assert evaluated_after_a_stop(contextlib.nullcontext, tau=0.9) == ["tiny_mmlu_pro", "tiny_gpqa"]
    assert evaluated_after_a_stop(other_code) == ["tiny_mmlu_pro", "tiny_gpqa"]
    assert evaluated_after_a_stop(other_data) == ["tiny_mmlu_pro", "tiny_gpqa"]


def test_a_model_is_decoded_with_the_block_size_it_was_trained_with(trained_tiny, tmp_path, monkeypatch):
    """No --block-size: a checkpoint trained with B=16 is decoded with 15 masks per window at tau < 1 (the window's
    first prediction comes from the last real token; the budget of 24 tokens leaves room for a full window), and
    the result records both."""
    import shutil

    import mars.decoding.engine
    import mars.evaluation.evaluate as ev

    model = tmp_path / "mars_b16"
    shutil.copytree(trained_tiny["mars"], model)
    run_config = json.loads((model / "run_config.json").read_text())
    assert run_config["spec"]["block_size"] == 4
    run_config["spec"]["block_size"] = 16
    (model / "run_config.json").write_text(json.dumps(run_config))
    config = json.loads((model / "config.json").read_text())  # where a checkpoint records its window first
    assert config["mars"]["block_size"] == 4
    config["mars"]["block_size"] = 16
    (model / "config.json").write_text(json.dumps(config))
    widths = []
    real_window_forward = mars.decoding.engine.window_forward

    def counting(model_, kv, rows, tail, *args, **kwargs):
        widths.append(int(tail.shape[1]))
        return real_window_forward(model_, kv, rows, tail, *args, **kwargs)

    monkeypatch.setattr(mars.decoding.engine, "window_forward", counting)
    for checkpoint, trained in ((model, 16), (trained_tiny["mars"], 4)):
        widths.clear()
        [(_, record)] = ev.evaluate(
            model=checkpoint,
            tasks="tiny_gsm8k",
            data=trained_tiny["world"] / "data",
            tau=0.5,
            limit=1,
            batch_size=1,
            max_gen_toks=24,
            output=tmp_path / f"r{trained}.json",
            device="cpu",
        )
        assert max(widths) == trained - 1 and record["model_args"]["block_size"] == trained
        assert record["model"]["trained_block_size"] == trained


def test_until_replaces_the_tasks_stop_sequences(trained_tiny, tmp_path):
    """``until`` replaces a task's own stop sequences (``[""]``: none, only EOS and the budget end an answer): each
    answer is HF greedy ``generate``'s text on the same context, cut at the first given stop string."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import mars.evaluation.evaluate as ev

    checkpoint = trained_tiny["ar"]

    def run(until, name):
        [(_, record)] = ev.evaluate(
            model=checkpoint,
            tasks="tiny_gsm8k",
            data=trained_tiny["world"] / "data",
            method="ar",
            tau=1.0,
            limit=2,
            batch_size=2,
            max_gen_toks=24,
            output=tmp_path / name,
            device="cpu",
            until=until,
        )
        return record

    free, cut, own = run([""], "free.json"), run([" "], "cut.json"), run(None, "own.json")
    assert free["eval_args"]["until"] == [] and cut["eval_args"]["until"] == [" "] and "until" not in own["eval_args"]
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForCausalLM.from_pretrained(checkpoint).eval()
    cut_somewhere = False
    for a, b, c in zip(free["samples"], cut["samples"], own["samples"], strict=True):
        assert a["prompt"] == b["prompt"] == c["prompt"]
        ids = tokenizer(a["prompt"], return_tensors="pt", add_special_tokens=False).input_ids
        out = model.generate(ids, max_new_tokens=24, do_sample=False, pad_token_id=tokenizer.pad_token_id)
        text = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
        assert a["generation"] == text
        assert b["generation"] == text.split(" ")[0]
        cut_somewhere |= b["generation"] != text
    assert cut_somewhere  # (the stop string occurs: the test can tell a replaced stop from an ignored one)
