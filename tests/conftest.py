import os
import random
import socket
from pathlib import Path

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def arithmetic_records(n: int, seed: int = 0) -> list[dict]:
    """A one-family stand-in corpus: enough to train a few steps, independent of mars.world.tasks."""
    rng = random.Random(seed)
    records = []
    for _ in range(n):
        a, b = rng.randint(1, 30), rng.randint(1, 30)
        records.append({"prompt": f"What is {a} plus {b}?", "response": f"{a} + {b} = {a + b}. #### {a + b}"})
    return records


@pytest.fixture(scope="session")
def small_init(tmp_path_factory) -> Path:
    """data/train.jsonl + init/ (tokenizer with a mask token, random tiny Qwen2) for training tests."""
    from mars.training.data import write_jsonl
    from mars.world.build import tiny_model
    from mars.world.tokenizer import train_tokenizer

    root = tmp_path_factory.mktemp("small_init")
    records = arithmetic_records(64)
    write_jsonl(root / "data" / "train.jsonl", records)
    tokenizer = train_tokenizer([r["prompt"] + "\n" + r["response"] for r in records], 300)
    model = tiny_model(
        tokenizer,
        {
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
        },
        seed=0,
    )
    model.save_pretrained(root / "init")
    tokenizer.save_pretrained(root / "init")
    return root


@pytest.fixture(scope="session", autouse=True)
def _mlflow_store(tmp_path_factory):
    """The tests log into one throwaway sqlite store, never into results/."""
    path = tmp_path_factory.mktemp("mlflow") / "mlflow.db"
    previous = os.environ.get("MLFLOW_TRACKING_URI")
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{path}"
    yield path
    if previous is None:
        os.environ.pop("MLFLOW_TRACKING_URI", None)
    else:
        os.environ["MLFLOW_TRACKING_URI"] = previous


TRAINED_WORLD = {
    "kind": "tiny",
    "seed": 0,
    "train_per_family": 60,
    "test_per_family": 8,
    "vocab_size": 500,
    "model": {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    },
}


@pytest.fixture(scope="session")
def harness_task_manager():
    """The installed lm-eval's own task manager, read only (indexing every task YAML takes ~10 s: built once)."""
    from lm_eval.tasks import TaskManager

    return TaskManager()


@pytest.fixture(scope="session")
def trained_tiny(tmp_path_factory) -> dict:
    """A small tiny world and two briefly trained checkpoints of it (~30 s on 2 cores, once per session).

    Returns {"world": folder (data/, init/), "ar": AR-SFT checkpoint, "mars": MARS B=4 checkpoint from it}.
    The models are weak but not random: they produce the chat format, EOS, and confident spans.
    """
    from mars.pipeline.config import TrainSpec
    from mars.training.train import train
    from mars.world.build import build_world

    root = tmp_path_factory.mktemp("trained_tiny")
    world = root / "world"
    build_world(TRAINED_WORLD, world)
    common = dict(
        learning_rate=3e-3, batch_size=16, max_length=192, warmup_ratio=0.0, save_steps=1000, logging_steps=20, seed=0
    )
    data = str(world / "data")
    train(
        TrainSpec(method="ar", init="world", epochs=6, **common),
        init=str(world / "init"),
        data_dir=data,
        output=str(root / "ar"),
        experiment="fixtures",
    )
    train(
        TrainSpec(method="mars", init="ar", block_size=4, epochs=3, **common),
        init=str(root / "ar"),
        data_dir=data,
        output=str(root / "mars"),
        experiment="fixtures",
    )
    return {"world": world, "ar": root / "ar", "mars": root / "mars"}


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a connection fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.fixture
def offline_hub(no_network, monkeypatch):
    """No network, and the Hugging Face libraries told so (as on an offline cluster)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


@pytest.fixture(scope="module")
def single_thread():
    """One torch thread for a module's tests: with tiny models one intra-op thread is fastest, and on a shared
    2-core machine OpenMP contention makes 2 threads up to ~40x slower. Restored afterwards."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def pytest_configure(config):
    """``pytest tests/test_pipeline_smoke.py`` names the whole-workflow module: run it, although the default ``-m``
    (pyproject's addopts) leaves the ``pipeline`` marker out of a plain ``pytest``."""
    if config.option.markexpr == "not pipeline" and any("test_pipeline_smoke" in str(arg) for arg in config.args):
        config.option.markexpr = ""
