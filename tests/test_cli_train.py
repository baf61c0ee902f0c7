"""`mars train` on bad input: exit status 2, one clear error line, no output folder."""

import json
import shutil

import pytest
import yaml

from mars.cli import main
from mars.pipeline.config import load_config, train_spec
from mars.training.data import write_jsonl

GOOD = {
    "name": "clitest",
    "world": {"kind": "tiny"},
    "training": {"learning_rate": 1e-3, "batch_size": 4, "max_length": 64, "epochs": 1, "max_steps": 2},
    "models": {"m": {"method": "mars", "init": "world", "block_size": 4}},
}


def write_config(tmp_path, **model_overrides):
    config = yaml.safe_load(yaml.safe_dump(GOOD))
    config["models"]["m"].update(model_overrides)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def run_train(tmp_path, capsys, config, init, data):
    out = tmp_path / "out"
    code = main(
        [
            "train",
            "--config",
            str(config),
            "--model",
            "m",
            "--init",
            str(init),
            "--data",
            str(data),
            "--output",
            str(out),
        ]
    )
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, [line for line in err.splitlines() if line.startswith("error:")], out


@pytest.mark.parametrize(
    "override,needle",
    [
        ({"block_size": 0}, "block_size"),
        ({"method": "diffusion"}, "method"),
        ({"attention": "sideways"}, "attention"),
        ({"epochs": -1}, "epochs"),
        ({"init": "nonexistent_entry"}, "init"),
    ],
)
def test_bad_config_values(tmp_path, capsys, small_init, override, needle):
    config = write_config(tmp_path, **override)
    code, err, out = run_train(tmp_path, capsys, config, small_init / "init", small_init / "data")
    assert code == 2
    assert len(err) == 1 and err[0].startswith("error:") and needle in err[0]
    assert not out.exists()


def test_missing_init_checkpoint(tmp_path, capsys, small_init):
    code, err, out = run_train(
        tmp_path, capsys, write_config(tmp_path), tmp_path / "no" / "such" / "ckpt", small_init / "data"
    )
    assert code == 2 and len(err) == 1 and "--init" in err[0] and "no such checkpoint folder" in err[0]
    assert not out.exists()


def test_tokenizer_without_mask_token(tmp_path, capsys, small_init):
    from transformers import AutoTokenizer

    init = tmp_path / "init"
    shutil.copytree(small_init / "init", init)
    tokenizer = AutoTokenizer.from_pretrained(init)
    tokenizer.mask_token = None
    tokenizer.save_pretrained(init)
    assert AutoTokenizer.from_pretrained(init).mask_token_id is None
    code, err, out = run_train(tmp_path, capsys, write_config(tmp_path), init, small_init / "data")
    assert code == 2 and len(err) == 1 and "mask token" in err[0]
    assert not out.exists()


def test_empty_dataset(tmp_path, capsys, small_init):
    data = tmp_path / "data"
    write_jsonl(data / "train.jsonl", [])
    code, err, out = run_train(tmp_path, capsys, write_config(tmp_path), small_init / "init", data)
    assert code == 2 and len(err) == 1 and "empty" in err[0]
    assert not out.exists()


def test_prompt_longer_than_max_length(tmp_path, capsys, small_init):
    data = tmp_path / "data"
    write_jsonl(data / "train.jsonl", [{"prompt": "What is 1 plus 2? " * 40, "response": "3"}])
    code, err, out = run_train(tmp_path, capsys, write_config(tmp_path), small_init / "init", data)
    assert code == 2 and len(err) == 1 and "max_length" in err[0]
    assert not out.exists()


def test_missing_config_file_and_unknown_model(tmp_path, capsys, small_init):
    code, err, out = run_train(tmp_path, capsys, tmp_path / "missing.yaml", small_init / "init", small_init / "data")
    assert code == 2 and len(err) == 1 and "not found" in err[0]
    config = write_config(tmp_path)
    code = main(
        [
            "train",
            "--config",
            str(config),
            "--model",
            "zzz",
            "--init",
            str(small_init / "init"),
            "--data",
            str(small_init / "data"),
            "--output",
            str(tmp_path / "out"),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "unknown model 'zzz'" in err[0]


def test_shipped_configs_validate():
    for path in ("config.yaml", "configs/paper-0.5b.yaml", "configs/paper-7b.yaml"):
        config = load_config(path)
        for name in config["models"]:
            train_spec(config, name)
    paper = load_config("configs/paper-0.5b.yaml")
    assert paper["world"]["base_model"] == "Qwen/Qwen2.5-0.5B-Instruct"
    assert train_spec(paper, "mars_b4").learning_rate == 5e-6 and train_spec(paper, "mars_b4").bf16


def test_missing_split_file(tmp_path, capsys, small_init):
    code, err, out = run_train(
        tmp_path, capsys, write_config(tmp_path, split="pretrain"), small_init / "init", small_init / "data"
    )
    assert code == 2 and len(err) == 1 and "pretrain.jsonl" in err[0]
    assert not out.exists()


def test_training_reads_the_entry_split(tmp_path, capsys, small_init):
    # the same records under another name train the same model; the run config names the split
    data = tmp_path / "data"
    shutil.copytree(small_init / "data", data)
    (data / "train.jsonl").rename(data / "pretrain.jsonl")
    code, err, out = run_train(
        tmp_path, capsys, write_config(tmp_path, split="pretrain", method="lm"), small_init / "init", data
    )
    assert code == 0 and not err
    run_config = json.loads((out / "run_config.json").read_text())
    assert run_config["spec"]["split"] == "pretrain"
    assert json.loads((out / "metrics.json").read_text())["num_examples"] == 64
