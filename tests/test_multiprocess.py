"""Data-parallel training: 2 processes (the train rule's `accelerate launch`, gloo on CPU) give the per-step losses
of 1 process on the same global batch; effective_batch fixes the batch per optimizer step whatever the number of
processes."""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from mars.launch import train_launcher
from mars.pipeline.config import ConfigError, TrainSpec, resolve_grad_accum

ROOT = Path(__file__).resolve().parents[1]


def test_grad_accum_is_derived_from_the_effective_batch_and_the_processes():
    paper = TrainSpec(method="ar", init="world", batch_size=8, effective_batch=384)
    assert [resolve_grad_accum(paper, n) for n in (1, 2, 8)] == [48, 24, 6]
    assert resolve_grad_accum(TrainSpec(method="ar", init="world", grad_accum=3), 4) == 3  # as given
    assert resolve_grad_accum(TrainSpec(method="ar", init="world"), 4) == 1
    assert resolve_grad_accum(TrainSpec(method="ar", init="world", batch_size=8, grad_accum=6, effective_batch=384), 8)
    with pytest.raises(ConfigError, match=r"effective_batch': 384 is not a multiple of batch_size x processes = 8 x 5"):
        resolve_grad_accum(paper, 5)
    with pytest.raises(ConfigError, match="grad_accum': 6, but effective_batch 384 .* needs 48"):
        resolve_grad_accum(TrainSpec(method="ar", init="world", batch_size=8, grad_accum=6, effective_batch=384), 1)


def test_an_effective_batch_that_does_not_divide_is_one_error_line(small_init, tmp_path, monkeypatch, capsys):
    from mars.cli import main

    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "name": "ebtest",
                "world": {"kind": "tiny"},
                "training": {"batch_size": 8, "effective_batch": 384, "max_steps": 1},
                "models": {"m": {"method": "ar", "init": "world"}},
            }
        )
    )
    monkeypatch.setenv("WORLD_SIZE", "5")  # what accelerate launch / torchrun set for 5 processes
    out = tmp_path / "out"
    args = ["--model", "m", "--init", str(small_init / "init"), "--data", str(small_init / "data")]
    code = main(["train", "--config", str(config), *args, "--output", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0] == (
        "error: config key 'spec.effective_batch': 384 is not a multiple of batch_size x processes = 8 x 5 = 40"
    )
    assert not out.exists() and not (tmp_path / "out.work").exists()


def _data_with_heldout(small_init, tmp_path) -> Path:
    """The training records and 8 held-out ones (two eval batches of 4: one per process with 2 processes)."""
    from mars.training.data import load_records, write_jsonl
    from tests.conftest import arithmetic_records

    data = tmp_path / "data"
    if not data.is_dir():
        train = load_records(small_init / "data", "train")
        seen = {r["prompt"] for r in train}
        write_jsonl(data / "train.jsonl", train)
        write_jsonl(data / "heldout.jsonl", [r for r in arithmetic_records(40, seed=1) if r["prompt"] not in seen][:8])
    return data


def _run(small_init, tmp_path, name, method, processes):
    config = tmp_path / f"{name}.yaml"
    training = dict(learning_rate=2e-3, batch_size=4, effective_batch=8, max_length=64, max_steps=4, logging_steps=1)
    training.update(save_steps=100, warmup_ratio=0.0, seed=0, eval_steps=2)
    entry = {"method": method, "init": "world", **({"block_size": 4} if method == "mars" else {})}
    config.write_text(
        yaml.safe_dump({"name": "mp", "world": {"kind": "tiny"}, "training": training, "models": {"m": entry}})
    )
    out = tmp_path / name
    command = ["train", "--config", str(config), "--model", "m", "--init", str(small_init / "init")]
    data = _data_with_heldout(small_init, tmp_path)
    command += ["--data", str(data), "--output", str(out), "--results-dir", str(tmp_path / "results")]
    # the launch command of the workflow's train rule for a job of `processes` CPU processes (training.processes)
    launcher = shlex.split(train_launcher(0, None, ROOT, processes))
    assert launcher[:2] == (["accelerate", "launch"] if processes > 1 else ["mars"])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    proc = subprocess.run([*launcher, *command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_config = json.loads((out / "run_config.json").read_text())
    assert (run_config["processes"], run_config["grad_accum"], run_config["effective_batch"]) == (
        processes,
        2 // processes,
        8,
    )
    heldout = [h["eval_heldout_loss"] for h in run_config["log_history"] if "eval_heldout_loss" in h]
    assert len(heldout) == 2  # steps 2 and 4
    losses = [h for h in run_config["log_history"] if "loss" in h]
    return losses, heldout, load_file(str(out / "model.safetensors"))


@pytest.mark.slow
# MARS only: its loss (L_mask + w_AR L_AR, the step's counts gathered across processes) is this project's code; an AR
# job is TRL's SFTTrainer as it is, and the paper configs' rehearsal trains AR SFT under 2 processes (.ci/run).
@pytest.mark.parametrize("method", ["mars"])
def test_two_processes_give_the_losses_of_one_on_the_same_global_batch(small_init, tmp_path, method):
    one, heldout_one, weights_one = _run(small_init, tmp_path, "one", method, 1)
    two, heldout_two, weights_two = _run(small_init, tmp_path, "two", method, 2)
    assert len(one) == len(two) == 4
    # the held-out next-token loss: each process evaluates one of the two batches, gathered into the same mean
    assert heldout_two == pytest.approx(heldout_one, rel=1e-5)
    keys = ["loss"] + (["loss_mask", "loss_ar"] if method == "mars" else [])
    worst = max(abs(a[k] - b[k]) / abs(a[k]) for a, b in zip(one, two) for k in keys)
    print(f"{method}: worst relative difference of the per-step losses, 1 vs 2 processes: {worst:.2e}")
    assert worst < 1e-5
    assert one[-1]["loss"] < one[0]["loss"] - 0.1  # the steps did train
    moved = max((weights_one[k] - weights_two[k]).abs().max().item() for k in weights_one)
    assert moved < 1e-5
    assert all(torch.isfinite(v).all() for v in weights_two.values())
