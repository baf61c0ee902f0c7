"""Training and test records on disk: ``<data_dir>/{train,test}.jsonl``, one JSON object per line.

A record has ``prompt`` (the user message) and ``response`` (the gold assistant answer), or ``messages`` (the
conversation before the answer, for multi-turn SFT data) and ``response``; tiny-world records also carry
``family``, ``id`` and ``target`` (what the scorer needs).
"""

from __future__ import annotations

import json
from pathlib import Path

from mars.config import ConfigError


def prompt_messages(record: dict) -> list[dict]:
    if "messages" in record:
        return list(record["messages"])
    return [{"role": "user", "content": record["prompt"]}]


def read_jsonl(path: Path) -> list[dict]:
    records = []
    with open(path) as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{path}:{number}: not valid JSON ({exc.msg})") from exc
            if "response" not in record or ("prompt" not in record and "messages" not in record):
                raise ConfigError(f"{path}:{number}: a record needs 'response' and 'prompt' or 'messages'")
            records.append(record)
    return records


def write_jsonl(path: Path, records: list[dict]) -> None:
    """Atomic: the file appears complete or not at all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as handle:
        for record in records:
            handle.write(json.dumps(record, sort_keys=True) + "\n")
    tmp.replace(path)


def load_records(data_dir: str | Path, split: str) -> list[dict]:
    path = Path(data_dir) / f"{split}.jsonl"
    if not path.is_file():
        raise ConfigError(f"data file not found: {path}")
    return read_jsonl(path)


def load_train_records(data_dir: str | Path) -> list[dict]:
    return load_records(data_dir, "train")
