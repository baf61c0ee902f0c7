"""Bad input across the commands (issue 25's kinds): exit status 2, one ``error:`` line that says what is wrong,
no traceback, nothing left behind. (Ctrl-C during training: tests/test_preemption.py; each command's own checks:
tests/test_cli_train.py, tests/test_evaluate.py, tests/test_generation.py.)"""

import json
import shutil
import tempfile
from pathlib import Path

import pytest
import yaml

from mars.cli import main

ROOT = Path(__file__).resolve().parents[1]


def error_lines(capsys) -> list[str]:
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return [line for line in captured.err.splitlines() if line.strip()]


@pytest.fixture
def read_only_dir(tmp_path) -> Path:
    """A folder this process cannot create files in: a 0555 folder, or (root ignores modes) /sys's top level."""
    folder = tmp_path / "read_only"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        tempfile.NamedTemporaryFile(dir=folder).close()
    except OSError:
        return folder
    folder = Path("/sys")
    with pytest.raises(OSError):  # the fixture's premise, checked
        tempfile.NamedTemporaryFile(dir=folder).close()
    return folder


def train_config(tmp_path) -> Path:
    path = tmp_path / "config.yaml"
    training = {"learning_rate": 1e-3, "batch_size": 4, "max_length": 64, "max_steps": 2}
    body = {"name": "bad", "world": {"kind": "tiny"}, "training": training}
    path.write_text(yaml.safe_dump({**body, "models": {"m": {"method": "mars", "init": "world", "block_size": 4}}}))
    return path


@pytest.mark.parametrize("command", ["train", "eval", "bench", "mirror", "world"])
def test_an_output_in_a_read_only_folder_is_refused_before_any_work(command, read_only_dir, small_init, tmp_path,
                                                                    capsys):  # fmt: skip
    out = read_only_dir / "out"
    argv = {
        "train": [
            "train",
            "--config",
            str(train_config(tmp_path)),
            "--model",
            "m",
            "--init",
            str(small_init / "init"),
            "--data",
            str(small_init / "data"),
        ],  # fmt: skip
        "eval": ["eval", "--model", str(small_init / "init"), "--tasks", "tiny_gsm8k", "--data", str(tmp_path)],
        "bench": ["bench", "--model", str(small_init / "init")],
        "mirror": ["mirror", "--shape", "0.5b"],
        "world": ["world", "--config", str(ROOT / "configs" / "smoke.yaml")],
    }[command]
    if command == "eval":
        out = read_only_dir / "out.json"
    assert main([*argv, "--output", str(out)]) == 2
    err = error_lines(capsys)
    assert err == [f"error: --output {out}: cannot write in {read_only_dir} (Permission denied)"] or (
        len(err) == 1 and "cannot write in" in err[0]
    ), err
    assert not out.exists()


def test_an_output_below_a_file_is_refused(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    out = tmp_path / "file" / "m"
    assert main(["mirror", "--shape", "0.5b", "--output", str(out)]) == 2
    assert error_lines(capsys) == [f"error: --output {out}: {tmp_path / 'file'} is a file, not a folder"]


def test_a_truncated_init_checkpoint_is_one_line(small_init, tmp_path, capsys):
    init = tmp_path / "truncated"
    shutil.copytree(small_init / "init", init)
    weights = init / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    out = tmp_path / "out"
    argv = ["train", "--config", str(train_config(tmp_path)), "--model", "m", "--init", str(init)]
    assert main([*argv, "--data", str(small_init / "data"), "--output", str(out)]) == 2
    err = error_lines(capsys)
    assert len(err) == 1 and err[0].startswith(f"error: cannot load checkpoint {init}: "), err
    assert not out.exists() and not (tmp_path / "out.work").exists()


@pytest.mark.parametrize(
    "flags,needle",
    [
        (["--forward-reps", "1"], "--forward-reps: 1 is less than the minimum of 4"),
        (["--reps", "0"], "--reps: 0 is less than the minimum of 1"),
        (["--tau", "1.5"], "--tau: 1.5 is greater than the maximum of 1"),
        (["--cpu-linear", "mkl"], "--cpu-linear: 'mkl' is not one of ['default', 'onednn_packed']"),
        (
            ["--settings", "ar_hf_kv,mars_cursor,mars_cursor"],
            "--settings: ['ar_hf_kv', 'mars_cursor', 'mars_cursor'] has non-unique elements",
        ),
        (
            ["--settings", "mars_cursor,mars_tau1"],
            "--settings: must include ar_hf_kv (the reference of every speed-up)",
        ),
    ],
)
def test_bench_flags_are_checked_by_the_config_schema_before_the_bench(flags, needle, tmp_path, capsys):
    out = tmp_path / "bench"
    assert main(["bench", "--model", str(tmp_path / "never_loaded"), "--output", str(out), *flags]) == 2
    assert error_lines(capsys) == [f"error: {needle}"]
    assert not out.exists()


def test_bench_block_size_below_one_and_a_job_value_is_not_blamed_on_a_flag(tmp_path, capsys):
    out = tmp_path / "bench"
    assert main(["bench", "--model", str(tmp_path / "never_loaded"), "--output", str(out), "--block-size", "0"]) == 2
    assert error_lines(capsys) == ["error: --block-size must be >= 1, got 0"]
    # a bad value in --job is named as the job's key, not as a flag that was not given
    assert main(["bench", "--model", str(tmp_path / "nope"), "--output", str(out), "--job", '{"reps": 0}']) == 2
    assert error_lines(capsys) == ["error: --job key 'reps': 0 is less than the minimum of 1"]


def test_speculate_flags_are_checked_by_the_config_schema(tmp_path, capsys):
    roles = [x for role in ("target-ar", "target-mars", "draft-ar", "draft-mars") for x in (f"--{role}", "nope")]
    assert main(["speculate", *roles, "--output", str(tmp_path / "spec"), "--k", "0"]) == 2
    assert error_lines(capsys) == ["error: --k: 0 is less than the minimum of 1"]


def test_generate_refuses_a_window_below_one_and_a_window_it_cannot_know(small_init, tmp_path, capsys):
    assert main(["generate", "--model", str(tmp_path / "nope"), "--prompt", "hi", "--tau", "0.9"]) == 2
    assert error_lines(capsys) == [f"error: model checkpoint not found (no config.json): {tmp_path / 'nope'}"]
    model = str(small_init / "init")  # an AR checkpoint: its config.json names no block size
    assert main(["generate", "--model", model, "--prompt", "hi", "--tau", "0"]) == 2
    assert error_lines(capsys) == ["error: tau must be in (0, 1], got 0.0"]
    assert main(["generate", "--model", model, "--prompt", "hi", "--block-size", "0"]) == 2
    assert error_lines(capsys) == ["error: --block-size must be an integer >= 1, got 0"]
    assert main(["generate", "--model", model, "--prompt", "hi", "--tau", "0.9"]) == 2
    err = error_lines(capsys)
    assert len(err) == 1 and "no trained block size" in err[0] and "give --block-size" in err[0], err


def test_an_existing_eval_output_is_refused_unless_overwrite(small_init, tmp_path, capsys):
    out = tmp_path / "result.json"
    out.write_text("{}\n")
    argv = ["eval", "--model", str(small_init / "init"), "--tasks", "tiny_gsm8k", "--data", str(tmp_path)]
    assert main([*argv, "--output", str(out)]) == 2
    assert error_lines(capsys) == [
        f"error: --output exists: {out} (give --overwrite to replace it; a run stopped part way then resumes)"
    ]
    assert out.read_text() == "{}\n"
    # with --overwrite that check passes: the next one (this folder has no test.jsonl) fails instead
    assert main([*argv, "--output", str(out), "--overwrite"]) == 2
    err = error_lines(capsys)
    assert len(err) == 1 and "exists" not in err[0] and "test.jsonl" in err[0], err


@pytest.mark.parametrize("kind", ["relative, its folder exists", "relative, deep", "absolute"])
def test_a_missing_local_init_is_a_local_path_error_without_the_hub(kind, small_init, tmp_path, capsys, monkeypatch):
    import huggingface_hub

    def no_hub(*args, **kwargs):
        raise AssertionError("the hub was asked")

    for name in ("hf_hub_download", "snapshot_download", "try_to_load_from_cache"):
        monkeypatch.setattr(huggingface_hub, name, no_hub)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    init = {"relative, its folder exists": "models/missing", "relative, deep": "results/tiny/models/missing",
            "absolute": str(tmp_path / "missing")}[kind]  # fmt: skip
    argv = ["train", "--config", str(train_config(tmp_path)), "--model", "m", "--init", init]
    assert main([*argv, "--data", str(small_init / "data"), "--output", str(tmp_path / "out")]) == 2
    assert error_lines(capsys) == [f"error: --init {init}: no such checkpoint folder"]
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.work").exists()


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]], ids=["fetch", "dry-run"])
def test_prefetch_of_a_config_without_an_offline_section_says_so(dry_run, tmp_path, capsys):
    """The dry run gives the verdict the real run gives (it said "nothing to fetch" and exited 0)."""
    cache = tmp_path / "cache"
    assert main(["prefetch", "--config", str(ROOT / "config.yaml"), "--cache", str(cache), *dry_run]) == 2
    err = error_lines(capsys)
    assert len(err) == 1 and "has no offline.cache_dir" in err[0] and f"cache_dir: {cache}" in err[0], err
    assert not cache.exists()


def test_a_window_of_one_below_tau_one_is_refused_and_at_tau_one_decodes(small_init, tmp_path, capsys):
    """--block-size 1 appends no mask: below tau 1 it would decode one token per forward whatever tau (training
    refuses B = 1), so generate and eval refuse it; at tau 1.0 no mask is appended whatever the window."""
    model = str(small_init / "init")
    argv = ["generate", "--model", model, "--prompt", "hi", "--max-new-tokens", "3", "--block-size", "1"]
    assert main([*argv, "--tau", "0.9"]) == 2
    assert error_lines(capsys) == [
        "error: --block-size 1 leaves method mars no mask to fill: it would decode one token per forward whatever tau "
        "(training refuses block size 1); give --block-size >= 2, or tau 1.0"
    ]
    out = tmp_path / "eval.json"
    argv_eval = ["eval", "--model", model, "--tasks", "tiny_gsm8k", "--data", str(tmp_path), "--output", str(out)]
    assert main([*argv_eval, "--block-size", "1", "--tau", "0.5"]) == 2
    err = error_lines(capsys)
    assert len(err) == 1 and "--block-size 1 leaves method mars no mask to fill" in err[0], err
    assert not out.exists()
    assert main([*argv, "--tau", "1.0", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 1 and rows[0]["chunks"] == [1] * len(rows[0]["token_ids"])


def test_a_window_or_a_budget_past_the_models_positions_is_one_line(small_init, tmp_path, capsys):
    """A checkpoint whose config.json claims a window of 4096 on a model of 1024 positions, an explicit window past
    them, and a prompt plus --max-new-tokens past them: one line each, no decoding."""
    from transformers import AutoTokenizer

    model = tmp_path / "long_window"
    shutil.copytree(small_init / "init", model)
    config = json.loads((model / "config.json").read_text())
    assert config["max_position_embeddings"] == 1024  # the premise
    config["mars"] = {"method": "mars", "block_size": 4096, "variant": "mars", "mask_token": "<|mask|>"}
    (model / "config.json").write_text(json.dumps(config))
    argv = ["generate", "--model", str(model), "--prompt", "hi"]
    assert main([*argv, "--tau", "0.9"]) == 2
    assert error_lines(capsys) == [
        f"error: {model / 'config.json'}: mars.block_size 4096 exceeds the model's 1024 positions "
        "(max_position_embeddings)"
    ]
    init = str(small_init / "init")
    assert main(["generate", "--model", init, "--prompt", "hi", "--block-size", "2000", "--tau", "0.9"]) == 2
    assert error_lines(capsys) == [
        "error: --block-size 2000 exceeds the model's 1024 positions (max_position_embeddings)"
    ]
    tokenizer = AutoTokenizer.from_pretrained(init)
    chat = [{"role": "user", "content": "hi"}]
    n = len(tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=False))
    assert main(["generate", "--model", init, "--prompt", "hi", "--max-new-tokens", "2000"]) == 2
    assert error_lines(capsys) == [
        f"error: prompt 0 ({n} tokens) plus max_new_tokens 2000 exceeds the model's 1024 positions "
        "(max_position_embeddings)"
    ]
    assert main(["generate", "--model", init, "--prompt", "hi", "--max-new-tokens", str(1024 - n), "--json"]) == 0
