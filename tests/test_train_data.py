"""The training set: every assistant turn of a conversation is trained, single-turn labels are TRL's own, and
examples whose prompt fills max_length are dropped and counted instead of aborting the run."""

import json

import pytest
from datasets import Dataset

from mars.cli import main
from mars.training.data import build_dataset, load_records, write_jsonl
from mars.training.objective import IGNORE
from mars.training.train import load_init, make_trainer
from mars.world.build import build_world
from tests.test_train import spec
from tests.world.test_build import WORLD


def labelled_spans(ids, labels):
    spans, current = [], []
    for token, label in zip(ids, labels):
        if label != IGNORE:
            assert label == token
            current.append(token)
        elif current:
            spans.append(current)
            current = []
    return spans + ([current] if current else [])


def test_every_assistant_turn_of_a_conversation_is_trained(small_init):
    s = spec(method="ar", max_length=256)
    _, tokenizer = load_init(str(small_init / "init"), s)
    record = {
        "messages": [
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "What is 1 plus 2?"},
            {"role": "assistant", "content": "1 + 2 = 3. #### 3"},
            {"role": "user", "content": "What is 4 plus 5?"},
        ],
        "response": "4 + 5 = 9. #### 9",
    }
    row = build_dataset([record], tokenizer, s)[0]
    spans = [tokenizer.decode(span) for span in labelled_spans(row["input_ids"], row["labels"])]
    # ChatML: each assistant turn is "<|im_start|>assistant\n" + content + "<|im_end|>\n"; the content and what
    # follows it are trained, the role header and every system/user turn are not
    assert spans == ["1 + 2 = 3. #### 3<|im_end|>\n", "4 + 5 = 9. #### 9<|im_end|>\n"]
    assert tokenizer.decode(row["input_ids"]) == tokenizer.apply_chat_template(
        record["messages"] + [{"role": "assistant", "content": record["response"]}], tokenize=False
    )


@pytest.fixture(scope="module")
def tiny_world(tmp_path_factory):
    out = tmp_path_factory.mktemp("labels_world") / "world"
    build_world(WORLD, out)
    return out


@pytest.mark.parametrize("method", ["ar", "mars"])
def test_single_turn_labels_are_trls_prompt_completion_labels(tiny_world, tmp_path, method):
    """The tiny world's single-turn records (all but a few 1-shot bbh ones) give exactly the tokens and labels of
    TRL's own prompt-completion preparation (the training set before multi-turn support), after TRL's truncation."""
    s = spec(method=method, max_length=128)
    model, tokenizer = load_init(str(tiny_world / "init"), s)
    records = [r for r in load_records(tiny_world / "data", "train") if "messages" not in r]
    trl_rows = Dataset.from_list(
        [
            {
                "prompt": [{"role": "user", "content": r["prompt"]}],
                "completion": [{"role": "assistant", "content": r["response"]}],
            }
            for r in records
        ]
    )
    reference = make_trainer(s, model, tokenizer, trl_rows, tmp_path / "trl").train_dataset
    ours = make_trainer(s, model, tokenizer, build_dataset(records, tokenizer, s), tmp_path / "ours").train_dataset
    # the same examples are dropped (prompt fills max_length) as TRL drops after its truncation
    assert len(ours) == len(reference) < len(records)
    assert ours["input_ids"] == reference["input_ids"]
    assert ours["labels"] == reference["labels"]
    assert any(len(ids) == 128 for ids in ours["input_ids"])  # truncation is exercised


def test_one_shot_records_of_the_tiny_world_train_the_shot_and_the_answer(tiny_world):
    s = spec(method="mars", max_length=512)
    _, tokenizer = load_init(str(tiny_world / "init"), s)
    records = [r for r in load_records(tiny_world / "data", "train") if "messages" in r]
    assert records
    dataset = build_dataset(records, tokenizer, s)
    for record, row in zip(records, dataset):
        spans = [tokenizer.decode(span) for span in labelled_spans(row["input_ids"], row["labels"])]
        answers = [m["content"] for m in record["messages"] if m["role"] == "assistant"] + [record["response"]]
        assert spans == [answer + "<|im_end|>\n" for answer in answers]


def test_prompts_that_fill_max_length_are_dropped_and_counted(small_init, tmp_path, capsys):
    records = load_records(small_init / "data", "train")
    long_prompt = "What is 1 plus 2? " * 40  # > 64 tokens: no room for a response
    data = tmp_path / "data"
    write_jsonl(data / "train.jsonl", records[:16] + [{"prompt": long_prompt, "response": "3"}] * 3)
    config = tmp_path / "config.yaml"
    config.write_text(
        json.dumps(
            {
                "name": "droptest",
                "world": {"kind": "tiny"},
                "training": {"learning_rate": 1e-3, "batch_size": 4, "max_length": 64, "max_steps": 2},
                "models": {"m": {"method": "ar", "init": "world"}},
            }
        )
    )
    out = tmp_path / "out"
    args = ["train", "--config", str(config), "--model", "m", "--init", str(small_init / "init")]
    code = main([*args, "--data", str(data), "--output", str(out), "--results-dir", str(tmp_path / "results")])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "dropped 3 of 19 examples" in err
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["dropped_examples"] == 3 and metrics["num_examples"] == 16
    import mlflow

    run_id = json.loads((out / "run_config.json").read_text())["mlflow_run_id"]
    assert mlflow.MlflowClient().get_run(run_id).data.metrics["dropped_examples"] == 3
