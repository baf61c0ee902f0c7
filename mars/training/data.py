"""Training and test records on disk: ``<data_dir>/{train,test}.jsonl``, one JSON object per line.

A record has ``prompt`` (the user message) and ``response`` (the gold assistant answer), or ``messages`` (the
conversation before the answer, for multi-turn SFT data) and ``response``; tiny-world records also carry
``family``, ``id`` and ``target`` (what the scorer needs).  Training uses the whole conversation
(``messages`` + ``response``) and trains every assistant turn in it (``mars.training.train.tokenize_conversation``).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable
from pathlib import Path

from mars.fileio import write_lines_atomic
from mars.pipeline.config import ConfigError


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


def write_jsonl(path: Path, records: Iterable[dict]) -> None:
    """Atomic: the file appears complete or not at all. Streamed: records may be a generator."""
    write_lines_atomic(path, (json.dumps(record, sort_keys=True) + "\n" for record in records))


def load_records(data_dir: str | Path, split: str) -> list[dict]:
    path = Path(data_dir) / f"{split}.jsonl"
    if not path.is_file():
        raise ConfigError(f"data file not found: {path}")
    return read_jsonl(path)


def conversation_record(messages: list[dict]) -> dict | None:
    """A chat SFT example (list of {role, content}) -> {messages: context, response: last assistant turn}.

    Earlier assistant turns stay in ``messages`` and are trained too; examples too long for the training
    ``max_length`` are dropped (and counted) by ``mars train``, which knows it, not here."""
    if not messages or messages[-1].get("role") != "assistant":
        return None
    context = [{"role": m["role"], "content": m["content"]} for m in messages[:-1]]
    if not any(m["role"] == "user" for m in context):
        return None
    return {"messages": context, "response": messages[-1]["content"]}


def export_hf_sft(world: dict, out: str | Path) -> dict:
    """The paper-scale SFT data (e.g. allenai/Dolci-Instruct-SFT, a ``messages`` column) as ``<out>/data/train.jsonl``.

    ``world.dataset`` is a hub id (needs the hub, or the offline cache of ``mars prefetch``) or a local folder (a
    mirror: ``mars mirror``); a data set that cannot be loaded fails with one clear line.
    """
    from datasets import load_dataset

    out = Path(out)
    # A local folder (a mirror) is prepared in a private cache: `datasets` may otherwise reuse what it prepared from
    # an earlier version of a folder at the same path and name (measured: a rebuilt mirror exported its old rows).
    local = Path(world["dataset"]).expanduser().is_dir()
    with tempfile.TemporaryDirectory(prefix="mars_world_dataset_") as private_cache:
        try:
            dataset = load_dataset(
                world["dataset"], split=world.get("split", "train"), **({"cache_dir": private_cache} if local else {})
            )
        except Exception as exc:  # offline, unknown dataset, ...: one line, not a traceback
            raise ConfigError(f"cannot load dataset {world['dataset']}: {str(exc).splitlines()[0]}") from exc
        return _export_conversations(world, dataset, out)


def _export_conversations(world: dict, dataset, out: Path) -> dict:
    if "messages" not in dataset.column_names:
        raise ConfigError(f"dataset {world['dataset']} has no 'messages' column")
    kept = 0
    every = world.get("heldout_every")
    heldout = []  # every n-th usable conversation: the held-out slice each training run logs its loss on (small)

    def usable():  # streamed to the file: Dolci's ~2M conversations are never all in memory
        nonlocal kept
        seen = 0
        for example in dataset:
            record = conversation_record(example["messages"])
            if record is not None:
                seen += 1
                if every and seen % every == 0:
                    heldout.append(record)
                else:
                    kept += 1
                    yield record
            if world.get("max_examples") and seen >= world["max_examples"]:
                break
        if not kept:  # raised inside the writer: the file is not created
            raise ConfigError(f"dataset {world['dataset']} has no usable conversations")

    write_jsonl(out / "data" / "train.jsonl", usable())
    if every:
        if not heldout:
            raise ConfigError(f"world.heldout_every {every}: the data set has fewer usable conversations than that")
        write_jsonl(out / "data" / "heldout.jsonl", heldout)
    return {"train_examples": kept, "heldout_examples": len(heldout), "dataset": world["dataset"]}
