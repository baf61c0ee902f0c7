"""Training runs on a tiny model: losses fall, accumulation equals one big batch, a killed run resumes exactly."""

import dataclasses
import json
import os
import time

import pytest
import torch
from safetensors.torch import load_file

from mars.pipeline.config import ConfigError, TrainSpec
from mars.training.data import build_dataset, load_records
from mars.training.train import load_init, make_trainer, train


def spec(**overrides) -> TrainSpec:
    fields = dict(
        method="mars",
        init="world",
        block_size=4,
        w_ar=1.0,
        epochs=1,
        learning_rate=2e-3,
        batch_size=8,
        max_length=64,
        save_steps=4,
        logging_steps=1,
        warmup_ratio=0.0,
        seed=0,
    )
    return TrainSpec(**{**fields, **overrides})


def weights(folder) -> dict:
    return load_file(str(folder / "model.safetensors"))


@pytest.mark.parametrize(
    "method,attention,w_ar",
    [("mars", "mars", 1.0), ("mars", "bidirectional", 1.0), ("mars", "mars", 0.0), ("block_diffusion", "mars", 0.0)],
)
def test_short_run_lowers_the_losses(small_init, tmp_path, monkeypatch, method, attention, w_ar):
    monkeypatch.setenv("MARS_CONFIG_HASH", "cafe12345678")  # what the workflow exports
    out = tmp_path / "model"
    metrics = train(
        spec(method=method, attention=attention, w_ar=w_ar, epochs=4),
        init=str(small_init / "init"),
        data_dir=str(small_init / "data"),
        output=str(out),
        experiment="test",
    )
    history = [h for h in json.loads((out / "run_config.json").read_text())["log_history"] if "loss_mask" in h]
    first, last = history[0], history[-1]
    assert last["loss_mask"] < first["loss_mask"] - 0.3
    if w_ar:
        assert last["loss_ar"] < first["loss_ar"] - 0.3
    assert metrics["optimizer_steps"] == 32
    # MLflow holds the params, both losses per step, the final metrics and the run config
    import mlflow

    run_id = json.loads((out / "run_config.json").read_text())["mlflow_run_id"]
    client = mlflow.MlflowClient()
    run = client.get_run(run_id)
    assert run.data.params["block_size"] == "4" and run.data.params["method"] == method
    assert run.data.tags["config_hash"] == "cafe12345678" and run.data.tags["git_commit"]
    assert len(client.get_metric_history(run_id, "loss_mask")) == 32  # logging_steps=1: one value per step
    assert "optimizer_steps" in run.data.metrics
    assert "run_config.json" in [a.path for a in client.list_artifacts(run_id)]
    # a plain Hugging Face folder: loads without custom code
    from transformers import AutoModelForCausalLM, AutoTokenizer

    AutoModelForCausalLM.from_pretrained(out)
    assert AutoTokenizer.from_pretrained(out).mask_token_id is not None


def _one_update(small_init, work, batch_size, grad_accum, method="mars"):
    s = spec(
        method=method,
        w_ar=0.0 if method == "block_diffusion" else 1.0,
        batch_size=batch_size,
        grad_accum=grad_accum,
        max_steps=2,
        epochs=1,
        save_steps=100,
    )
    model, tokenizer = load_init(str(small_init / "init"), s)
    dataset = build_dataset(load_records(small_init / "data", "train"), tokenizer, s)
    trainer = make_trainer(s, model, tokenizer, dataset, work)
    trainer.train()
    return {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}


@pytest.mark.parametrize("method", ["mars", "ar"])
def test_gradient_accumulation_equals_one_big_batch(small_init, tmp_path, method):
    big = _one_update(small_init, tmp_path / "big", 8, 1, method)
    accumulated = _one_update(small_init, tmp_path / "acc", 2, 4, method)
    start = load_file(str(small_init / "init" / "model.safetensors"))
    moved = max((big[k] - start[k]).abs().max().item() for k in start)
    assert moved > 1e-3  # the update is not vacuous
    worst = max((big[k] - accumulated[k]).abs().max().item() for k in start)
    assert worst < 1e-5 * max(1.0, moved) + 2e-6


@pytest.mark.parametrize("sort_micro_batches", [False, True])
def test_killed_run_resumes_to_the_same_weights(small_init, tmp_path, sort_micro_batches):
    # 16 optimizer steps (of 4 micro-batches of 2 when sorted), checkpoints every 3
    micro = dict(batch_size=2, grad_accum=4) if sort_micro_batches else {}
    s = spec(epochs=2, save_steps=3, sort_micro_batches=sort_micro_batches, **micro)
    kwargs = dict(init=str(small_init / "init"), data_dir=str(small_init / "data"), experiment="test")
    train(s, output=str(tmp_path / "straight"), **kwargs)
    killed = time.time()
    with pytest.raises(KeyboardInterrupt):
        train(s, output=str(tmp_path / "resumed"), abort_after_step=6, **kwargs)
    killed = time.time() - killed
    assert not (tmp_path / "resumed").exists()  # nothing half-written where a finished model would be
    assert (tmp_path / "resumed.work").is_dir()
    # checkpoints of other settings are never resumed: one line naming what changed, the checkpoints kept
    with pytest.raises(ConfigError, match=r"holds checkpoints of other settings \(changed: learning_rate\)"):
        train(dataclasses.replace(s, learning_rate=s.learning_rate * 2), output=str(tmp_path / "resumed"), **kwargs)
    assert (tmp_path / "resumed.work" / "checkpoint-6").is_dir()
    # nor of another start at the same path (a start retrained in place: here, its weights file rewritten)
    weights_file = small_init / "init" / "model.safetensors"
    stat = weights_file.stat()
    os.utime(weights_file, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    try:
        with pytest.raises(ConfigError, match=r"other settings \(changed: init_files\)"):
            train(s, output=str(tmp_path / "resumed"), **kwargs)
    finally:
        os.utime(weights_file, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    # how often it saves and logs is not what it computes: the same run resumes
    last = time.time()
    metrics = train(dataclasses.replace(s, save_steps=5, logging_steps=2), output=str(tmp_path / "resumed"), **kwargs)
    last = time.time() - last
    assert metrics["resumed_from"].endswith("checkpoint-6")
    a, b = weights(tmp_path / "straight"), weights(tmp_path / "resumed")
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    assert not (tmp_path / "resumed.work").exists()
    # ... and records what the uninterrupted run records: the training loss over all 16 steps (6 of them before the
    # kill), not over the 10 after it (the loss sums are float32 sums between logs, logged every 2 steps after the
    # resume: equal to rounding)
    straight, resumed = (json.loads((tmp_path / n / "metrics.json").read_text()) for n in ("straight", "resumed"))
    assert metrics == resumed
    assert resumed["train_loss"] == pytest.approx(straight["train_loss"], rel=1e-6)
    assert resumed["first_loss"] == straight["first_loss"]
    # every other record alike, but the times, where it resumed from and the last logged interval's losses (the last
    # 2 steps here, the last step there: logging_steps changed)
    own = {"train_loss", "train_runtime_s", "wall_time_s", "wall_time_s_before_resume", "resumed_from"}
    own |= {"final_loss", "final_loss_mask", "final_loss_ar"}
    assert {k: v for k, v in resumed.items() if k not in own} == {k: v for k, v in straight.items() if k not in own}
    # the times cover both invocations: the killed one up to its checkpoint, and the last one
    assert straight["wall_time_s_before_resume"] == 0.0 and 0 < resumed["wall_time_s_before_resume"] <= killed
    assert resumed["wall_time_s"] - resumed["wall_time_s_before_resume"] <= last
    last_loop = json.loads((tmp_path / "resumed" / "run_config.json").read_text())["log_history"][-1]["train_runtime"]
    assert resumed["train_runtime_s"] > last_loop and resumed["train_runtime_s"] - last_loop <= killed
    assert resumed["train_runtime_s"] <= resumed["wall_time_s"]


def test_sorted_micro_batches_cut_padding_and_keep_random_steps(small_init, tmp_path):
    # A quarter of the records are 4x longer: random micro-batches nearly all pad to a long one; sorting each
    # optimizer step's examples by length before cutting it into micro-batches does not.
    records = load_records(small_init / "data", "train")
    records = [dict(r, response=" ".join([r["response"]] * 4)) if i % 4 == 0 else r for i, r in enumerate(records)]

    def epoch(sort_micro_batches):
        s = spec(method="ar", batch_size=4, grad_accum=4, max_length=256, sort_micro_batches=sort_micro_batches)
        model, tokenizer = load_init(str(small_init / "init"), s)
        dataset = build_dataset(records, tokenizer, s)
        trainer = make_trainer(s, model, tokenizer, dataset, tmp_path / str(sort_micro_batches))
        lengths = [len(ids) for ids in trainer.train_dataset["input_ids"]]
        batches = [b["attention_mask"] for b in trainer.get_train_dataloader()]
        real = [[int(n) for n in b.sum(1)] for b in batches]
        assert sorted(n for b in real for n in b) == sorted(lengths)  # each example once
        return sum(b.numel() for b in batches) - sum(map(sum, real)), real  # padding tokens, lengths per batch

    sorted_padding, sorted_batches = epoch(True)
    random_padding, _ = epoch(False)
    assert sorted_padding < 0.5 * random_padding
    # each optimizer step (4 micro-batches) is sorted by length, and the steps themselves are not
    steps = [sum(sorted_batches[i : i + 4], []) for i in range(0, len(sorted_batches), 4)]
    assert all(step == sorted(step) for step in steps)
    assert sum(step[-1] >= 2 * step[0] for step in steps) >= len(steps) // 2  # long and short records mixed


def test_step_sorted_sampler_is_a_seeded_permutation_per_epoch():
    from mars.training.trainer import StepSortedSampler

    lengths = [7, 3, 9, 1, 5, 8, 2, 6, 4, 10, 0]
    sampler = StepSortedSampler(lengths, step_size=4, seed=3)
    first = list(sampler)
    assert sorted(first) == list(range(len(lengths)))
    groups = [first[i : i + 4] for i in range(0, len(first), 4)]
    assert all([lengths[i] for i in g] == sorted(lengths[i] for i in g) for g in groups)
    assert list(sampler) == first  # same epoch, same order
    # the groups are the seeded permutation's consecutive chunks (brute force)
    order = torch.randperm(len(lengths), generator=torch.Generator().manual_seed(3 * 1_000_003)).tolist()
    assert [set(g) for g in groups] == [set(order[i : i + 4]) for i in range(0, len(order), 4)]
    sampler.set_epoch(1)
    assert list(sampler) != first


def _next_token_loss(model_dir, records, max_length):
    """Brute force: every record alone through the saved model, mean cross-entropy over its response tokens."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mars.training.data import prompt_messages, tokenize_conversation

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    total, count = 0.0, 0
    for record in records:
        ids, labels = tokenize_conversation(
            tokenizer, prompt_messages(record) + [{"role": "assistant", "content": record["response"]}]
        )
        ids, labels = torch.tensor(ids[:max_length]), torch.tensor(labels[:max_length])
        with torch.no_grad():
            logits = model(ids[None]).logits[0, :-1]
        targets = labels[1:]
        keep = targets != -100
        total += torch.nn.functional.cross_entropy(logits[keep], targets[keep], reduction="sum").item()
        count += int(keep.sum())
    return total / count


@pytest.mark.parametrize("method", ["ar", "mars"])
def test_heldout_loss_is_the_next_token_loss_of_the_final_model(small_init, tmp_path, method):
    """With data/heldout.jsonl the run logs the next-token loss on it (and on as many training records) every
    eval_steps and at the end; for MARS too it is the plain next-token loss, not the dual-stream objective."""
    from mars.training.data import write_jsonl
    from tests.conftest import arithmetic_records

    data = tmp_path / "data"
    train_records = load_records(small_init / "data", "train")
    heldout = [r for r in arithmetic_records(40, seed=1) if r["prompt"] not in {t["prompt"] for t in train_records}][:6]
    write_jsonl(data / "train.jsonl", train_records)
    write_jsonl(data / "heldout.jsonl", heldout)
    out = tmp_path / "model"
    # one eval batch holds every held-out record: the logged loss is then the token mean over all of them
    s = spec(method=method, max_steps=5, eval_steps=2, batch_size=8)
    metrics = train(s, init=str(small_init / "init"), data_dir=str(data), output=str(out), experiment="test")
    logged = [h for h in json.loads((out / "run_config.json").read_text())["log_history"] if "eval_heldout_loss" in h]
    assert [h["step"] for h in logged] == [2, 4, 5]  # every eval_steps, and the final weights
    assert metrics["final_heldout_loss"] == pytest.approx(_next_token_loss(out, heldout, s.max_length), rel=1e-4)
    # the training-record slice: 6 records evenly spaced over the 64 (its families come in blocks)
    stride = len(train_records) / 6
    picked = [train_records[int(i * stride)] for i in range(6)]
    assert metrics["final_train_slice_loss"] == pytest.approx(_next_token_loss(out, picked, s.max_length), rel=1e-4)


def test_the_training_slice_has_the_heldout_sets_mixture():
    """Per family as many training records as the held-out set has, evenly spaced within the family; families the
    held-out set lacks (the tiny world's facts) are not drawn; without families, evenly spaced over all."""
    from mars.training.data import training_slice

    records = [{"family": "facts", "id": i} for i in range(3)]
    records += [{"family": "a", "id": 10 + i} for i in range(4)] + [{"family": "b", "id": 20 + i} for i in range(3)]
    heldout = [{"family": "a"}, {"family": "b"}, {"family": "a"}]
    assert [r["id"] for r in training_slice(records, heldout)] == [10, 12, 20]
    plain = [{"id": i} for i in range(10)]
    assert [r["id"] for r in training_slice(plain, [{}, {}, {}, {}])] == [0, 2, 5, 7]


def test_mars_config_sets_nothing_the_user_did_not_and_warns_of_nothing(tmp_path):
    """No FutureWarning about gradient_checkpointing the user never set (TRL's config sets transformers' deprecated
    alias), activation checkpointing off, and no intermediate checkpoints unless asked for."""
    import warnings

    from mars import MARSConfig

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        args = MARSConfig(str(tmp_path / "out"), report_to="none")
    assert [str(w.message) for w in caught if "checkpointing" in str(w.message)] == []
    assert args.activation_checkpointing is False and args.gradient_checkpointing is False
    assert args.save_strategy == "no"
    for name in ("activation_checkpointing", "gradient_checkpointing"):  # either name still turns it on
        assert MARSConfig(str(tmp_path / "out"), report_to="none", **{name: True}).activation_checkpointing is True
    assert MARSConfig(str(tmp_path / "out"), report_to="none", save_strategy="steps").save_strategy == "steps"


CHAT = [{"role": "user", "content": "What is 2 plus 3?"}, {"role": "assistant", "content": "2 + 3 = 5. #### 5"}]


@pytest.mark.parametrize(
    "rows,message",
    [
        ([{"question": "q", "answer": "a"}] * 4, "train_dataset has the columns ['question', 'answer']; MARSTrainer"),
        (
            [{"messages": CHAT}, {"messages": CHAT[:1]}, {"messages": CHAT}, {"messages": CHAT[:1]}],
            "2 of 4 examples of train_dataset have no assistant turn to train on, the first: example 1",
        ),
    ],
    ids=["no known columns", "no assistant turn"],
)
def test_a_dataset_mars_cannot_train_on_is_one_exception_before_any_work(small_init, tmp_path, rows, message):
    from datasets import Dataset

    from mars import MARSConfig, MARSTrainer

    out = tmp_path / "out"
    with pytest.raises(ValueError) as raised:
        MARSTrainer(model=str(small_init / "init"), args=MARSConfig(str(out)), train_dataset=Dataset.from_list(rows))
    assert str(raised.value).startswith(message), raised.value
    assert not out.exists()  # no empty output folder left behind


def test_save_model_leaves_the_model_and_a_card_naming_its_start_and_decoding(small_init, tmp_path, monkeypatch):
    """After train() and save_model(), as the README does: the final model and nothing beside it (no checkpoint-N/
    with optimizer state), and a model card that names the real start and how to decode the model."""
    from datasets import Dataset

    from mars import MARSConfig, MARSTrainer

    monkeypatch.chdir(tmp_path)
    args = MARSConfig("mars-out", block_size=4, max_steps=2, per_device_train_batch_size=4, report_to="none")
    start = str(small_init / "init")
    trainer = MARSTrainer(model=start, args=args, train_dataset=Dataset.from_list([{"messages": CHAT}] * 8))
    trainer.train()
    trainer.save_model()
    saved = sorted(p.name for p in (tmp_path / "mars-out").iterdir())
    assert not [name for name in saved if name.startswith("checkpoint-")], saved
    assert {"model.safetensors", "config.json", "README.md"} <= set(saved)
    card = (tmp_path / "mars-out" / "README.md").read_text()
    assert "[None]" not in card and f"A fine-tuned version of `{start}` (a local checkpoint)" in card
    mask = trainer.processing_class.mask_token
    assert f"block size B = 4: each forward appends\n  B - 1 = 3 copies of the mask token `{mask}`" in card
    assert "2 optimizer steps" in card
    trainer.save_model("elsewhere")  # a save to another folder carries its card too
    assert (tmp_path / "elsewhere" / "README.md").read_text() == card.replace("# mars-out", "# elsewhere")


@pytest.mark.parametrize("method", ["mars", "ar"])
def test_a_chain_of_stopped_entries_trains_the_uninterrupted_runs_weights(small_init, tmp_path, method):
    """A learning curve's chain (configs/smollm2-curve.yaml): stop_at_step keeps the Trainer checkpoint in the model
    folder; resume_from goes on from it, to the bit the weights of one uninterrupted run (16 steps: stops at 5, 11),
    and its records are that run's: logged every 4 steps, the logs at steps 8 and 12 average steps from both sides
    of a stop."""
    s = spec(epochs=2, save_steps=3, logging_steps=4, method=method)
    kwargs = dict(init=str(small_init / "init"), data_dir=str(small_init / "data"), experiment="test")
    straight = train(s, output=str(tmp_path / "straight"), **kwargs)
    first = train(dataclasses.replace(s, stop_at_step=5), output=str(tmp_path / "p5"), **kwargs)
    assert first["optimizer_steps"] == 5
    assert (tmp_path / "p5" / "trainer_checkpoint" / "optimizer.pt").is_file()
    assert not (tmp_path / "p5.work").exists()
    middle = dataclasses.replace(s, stop_at_step=11, resume_from="p5")
    assert train(middle, output=str(tmp_path / "p11"), **kwargs)["optimizer_steps"] == 11
    end = train(dataclasses.replace(s, resume_from="p11"), output=str(tmp_path / "end"), **kwargs)
    assert end["optimizer_steps"] == 16 and not (tmp_path / "end" / "trainer_checkpoint").exists()
    a, b = weights(tmp_path / "straight"), weights(tmp_path / "end")
    for key in a:
        assert torch.equal(a[key], b[key]), key
    assert end["train_loss"] == pytest.approx(straight["train_loss"], rel=1e-12)  # over all 16 steps of the chain
    assert end["first_loss"] == straight["first_loss"] and end["final_loss_mask"] == straight["final_loss_mask"]

    def logs(folder):  # every log but the times and each invocation's closing summary (steps, loss of its own)
        history = json.loads((tmp_path / folder / "run_config.json").read_text())["log_history"]
        timing = ("runtime", "per_second")
        return [{k: v for k, v in h.items() if not k.endswith(timing)} for h in history if "train_loss" not in h]

    straight_logs = logs("straight")
    assert [h["step"] for h in straight_logs if "loss" in h] == [4, 8, 12, 16]
    assert logs("end") == straight_logs  # loss, loss parts, entropy, accuracy and token counts alike
    # a chain's entries differ in stop_at_step and resume_from only: another setting is one line, before any work
    with pytest.raises(ConfigError, match=r"trained with other settings \(changed: learning_rate\)"):
        train(dataclasses.replace(middle, learning_rate=1e-3), output=str(tmp_path / "lr"), **kwargs)
    with pytest.raises(ConfigError, match="stopped at 5"):
        train(dataclasses.replace(middle, stop_at_step=4), output=str(tmp_path / "early"), **kwargs)
    with pytest.raises(ConfigError, match="no finished model with a trainer_checkpoint"):
        train(dataclasses.replace(s, resume_from="end"), output=str(tmp_path / "after_end"), **kwargs)
    with pytest.raises(ConfigError, match="the schedule ends at step 16"):
        train(dataclasses.replace(s, stop_at_step=16), output=str(tmp_path / "too_late"), **kwargs)
    assert not (tmp_path / "too_late").exists()
