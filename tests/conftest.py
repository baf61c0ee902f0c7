import os
import random
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
    from mars.data import write_jsonl
    from mars.world.build import tiny_model
    from mars.world.tokenizer import train_tokenizer

    root = tmp_path_factory.mktemp("small_init")
    records = arithmetic_records(64)
    write_jsonl(root / "data" / "train.jsonl", records)
    tokenizer = train_tokenizer([r["prompt"] + "\n" + r["response"] for r in records], 300)
    model = tiny_model(tokenizer, {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                                   "num_attention_heads": 4, "num_key_value_heads": 2}, seed=0)
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
