"""The end of a SLURM time limit (SIGTERM or SIGUSR1) or Ctrl-C (SIGINT): a checkpoint is saved, the exit status is
128 + the signal with one line naming the checkpoint, and the rerun resumes from it and finishes (that a resumed run
reaches the weights of an uninterrupted one: tests/test_train.py's killed run); bf16 runs save a bf16
checkpoint."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[1]
STEPS = 20


def _config(tmp_path, **training):
    path = tmp_path / "config.yaml"
    base = dict(learning_rate=2e-3, batch_size=8, max_length=64, max_steps=STEPS, logging_steps=1, save_steps=1000)
    body = {"name": "pre", "world": {"kind": "tiny"}, "training": {**base, "warmup_ratio": 0.0, **training}}
    body["models"] = {"m": {"method": "mars", "init": "world", "block_size": 4}}
    path.write_text(yaml.safe_dump(body))
    return path


def _command(small_init, tmp_path, config, out):
    return [sys.executable, "-m", "mars.cli", "train", "--config", str(config), "--model", "m"] + [
        "--init",
        str(small_init / "init"),
        "--data",
        str(small_init / "data"),
        "--output",
        str(out),
        "--results-dir",
        str(tmp_path / "results"),
    ]


ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}


@pytest.mark.slow
# SIGINT here; SIGTERM and SIGUSR1 take the same path from the handler on (they are flagged the same way: below)
@pytest.mark.parametrize("signum", [signal.SIGINT])
def test_a_signal_saves_a_checkpoint_and_the_rerun_resumes_from_it(small_init, tmp_path, signum):
    config = _config(tmp_path)

    out = tmp_path / "preempted"
    command = _command(small_init, tmp_path, config, out)
    child = subprocess.Popen(command, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    for line in child.stdout:  # the Trainer prints one {'loss': ...} line per optimizer step
        if "'loss'" in line:
            child.send_signal(signum)  # mid-training: the first step just logged
            break
    _, err = child.communicate(timeout=600)
    assert child.returncode == 128 + signum, err[-2000:]
    assert not out.exists()  # no finished model yet
    checkpoints = sorted((tmp_path / "preempted.work").glob("checkpoint-*"))
    assert len(checkpoints) == 1
    name = signal.Signals(signum).name
    assert f"mars train: {name} received; saved {checkpoints[0]}: rerun the same command to resume from it" in err
    assert "Traceback" not in err
    step = int(checkpoints[0].name.split("-")[1])
    assert 1 <= step < STEPS

    proc = subprocess.run(command, env=ENV, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["resumed_from"].endswith(f"checkpoint-{step}") and metrics["optimizer_steps"] == STEPS
    assert all(torch.isfinite(v).all() for v in load_file(str(out / "model.safetensors")).values())


def test_a_bf16_run_saves_a_bf16_checkpoint(small_init, tmp_path):
    from transformers import AutoModelForCausalLM

    from mars.pipeline.config import load_config, train_spec
    from mars.training.train import train

    spec = train_spec(load_config(_config(tmp_path, bf16=True, max_steps=2)), "m")
    out = tmp_path / "bf16"
    train(spec, init=str(small_init / "init"), data_dir=str(small_init / "data"), output=str(out), experiment="t")
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    assert {t.dtype for t in load_file(str(out / "model.safetensors")).values()} == {torch.bfloat16}
    assert AutoModelForCausalLM.from_pretrained(out, dtype="auto").dtype == torch.bfloat16


def test_the_handler_flags_the_first_signal_and_ignores_the_rest():
    """SIGTERM, SIGUSR1 (what ``sbatch --signal`` sends) and SIGINT are flagged for the step's end, where the
    Trainer saves and stops; a later signal neither raises nor replaces the first (under ``accelerate launch`` one
    Ctrl-C reaches a worker twice, and the save must not be cut short)."""
    from types import SimpleNamespace

    from mars.training.train import PreemptionCallback

    callback = PreemptionCallback()
    callback.install()
    try:
        for signum in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT):
            callback.signum = 0
            os.kill(os.getpid(), signum)
            assert callback.signum == signum
            control = SimpleNamespace(should_save=False, should_training_stop=False)
            callback.on_step_end(SimpleNamespace(world_size=1), None, control)
            assert control.should_save and control.should_training_stop
        os.kill(os.getpid(), signal.SIGTERM)  # a second signal: nothing raised, the first one kept
        assert callback.signum == signal.SIGINT
    finally:
        callback.uninstall()
    assert signal.getsignal(signal.SIGINT) is not callback._handle


def test_a_checkpoint_cut_short_while_saving_is_not_resumed_from(tmp_path):
    from mars.training.train import last_complete_checkpoint

    assert last_complete_checkpoint(tmp_path) is None
    for step in (5, 10, 50):
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / "model.safetensors").write_bytes(b"x")
    for step in (5, 10):  # checkpoint-50 lost its trainer_state.json, the Trainer's last file
        (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
    assert last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-10")  # numeric order: 10 after 5
