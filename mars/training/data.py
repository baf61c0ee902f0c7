"""Training and test records on disk: ``<data_dir>/{train,test}.jsonl``, one JSON object per line.

A record has ``prompt`` (the user message) and ``response`` (the gold assistant answer), or ``messages`` (the
conversation before the answer, for multi-turn SFT data) and ``response``; tiny-world records also carry
``family``, ``id`` and ``target`` (what the scorer needs).  Training uses the whole conversation
(``messages`` + ``response``) and trains every assistant turn in it (:func:`tokenize_conversation`). The tokenized
training set (:func:`build_dataset`) and the sets its held-out next-token loss is measured on (:func:`eval_datasets`)
are built here too.
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from mars.fileio import write_lines_atomic
from mars.pipeline.config import ConfigError, TrainSpec
from mars.training.objective import IGNORE

if TYPE_CHECKING:
    from datasets import Dataset


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


def chat_ids(tokenizer, messages: list[dict], generation_prompt: bool = False) -> list[int]:
    """The token ids of `messages` rendered with the tokenizer's chat template (with the assistant's generation
    prompt appended when `generation_prompt`)."""
    return list(
        tokenizer.apply_chat_template(
            messages, add_generation_prompt=generation_prompt, tokenize=True, return_dict=True
        )["input_ids"]
    )


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def tokenize_conversation(
    tokenizer, messages: list[dict], every_token: bool = False, turns: str = "all"
) -> tuple[list[int], list[int]]:
    """(input_ids, labels) of one chat-formatted conversation; labels are -100 outside the trained tokens.

    ``turns="all"``: every assistant turn after the first user-side message is trained (standard multi-turn SFT, as
    TRL's ``assistant_only_loss``); ``turns="last"``: only the last message (the authors' recipe: everything before
    it is prompt; ``training.loss_turns``). A turn's tokens are found as TRL finds a completion: they start
    where the conversation before it, rendered with the generation prompt, stops matching the whole conversation, and
    end where the conversation through it does (so the end-of-turn token and what the template puts after it are
    trained, as TRL's prompt-completion path does). This works with any chat template that renders earlier turns the
    same way whatever follows them (ChatML, Qwen2.5), without ``{% generation %}`` markers. ``every_token``: the
    plain LM of the tiny base, where every token carries loss.
    """
    ids = chat_ids(tokenizer, messages)
    if every_token:
        return ids, list(ids)
    labels = [IGNORE] * len(ids)
    if turns not in ("all", "last"):
        raise ValueError(f"turns must be 'all' or 'last', got {turns!r}")
    first = len(messages) - 1 if turns == "last" else 1
    for turn in range(max(first, 1), len(messages)):
        if messages[turn]["role"] != "assistant":
            continue
        start = _common_prefix(chat_ids(tokenizer, messages[:turn], generation_prompt=True), ids)
        end = len(ids) if turn == len(messages) - 1 else _common_prefix(chat_ids(tokenizer, messages[: turn + 1]), ids)
        labels[start:end] = ids[start:end]
    return ids, labels


def build_dataset(records: list[dict], tokenizer, spec: TrainSpec) -> Dataset:
    """The tokenized training set (``input_ids``, ``labels``); TRL truncates it to ``max_length`` (keeping the start).

    An example whose first trained token lies at or beyond ``max_length`` (a prompt that leaves no room for a
    response) is dropped: the number dropped is ``len(records) - len(dataset)``. Only an empty result is an error.
    """
    from datasets import Dataset

    if not records:
        raise ConfigError("the training data set is empty")
    rows = {"input_ids": [], "labels": []}
    for record in records:
        messages = prompt_messages(record) + [{"role": "assistant", "content": record["response"]}]
        ids, labels = tokenize_conversation(tokenizer, messages, every_token=spec.method == "lm", turns=spec.loss_turns)
        if all(label == IGNORE for label in labels[: spec.max_length]):
            continue
        rows["input_ids"].append(ids)
        rows["labels"].append(labels)
    if not rows["input_ids"]:
        raise ConfigError(
            f"all {len(records)} examples have a prompt of at least max_length={spec.max_length} tokens: "
            "raise max_length or filter the data"
        )
    return Dataset.from_dict(rows)


def training_slice(records: list[dict], heldout: list[dict]) -> list[dict]:
    """As many training records as ``heldout`` holds, in its mixture, so that their loss gap is the generalisation
    gap and not a difference of content: per family (the tiny world's ``family`` key) as many records of that family
    as the held-out set has, evenly spaced over that family's records (records of families the held-out set lacks,
    such as the tiny world's fact records, are not drawn); without families (an hf world, whose held-out set is a
    uniform subsample), evenly spaced over all records."""

    def spaced(pool: list[dict], n: int) -> list[dict]:
        n = min(n, len(pool))
        return [pool[int(i * len(pool) / n)] for i in range(n)]

    if not all("family" in r for r in heldout):
        return spaced(records, len(heldout))
    wanted = Counter(r["family"] for r in heldout)
    return [r for family, n in wanted.items() for r in spaced([r for r in records if r.get("family") == family], n)]


def eval_datasets(data_dir: str | Path, spec: TrainSpec, tokenizer, records: list[dict]) -> dict[str, Dataset] | None:
    """What the held-out next-token loss is measured on: ``heldout`` (``<data>/heldout.jsonl``: records of the same
    generators / data set that are in no training set) and ``train``, the same mixture drawn from the training
    ``records`` (training_slice). Their gap is the generalisation gap of next-token prediction. None without
    ``eval_steps`` or without a held-out file."""
    path = Path(data_dir) / "heldout.jsonl"
    if spec.eval_steps is None or not path.is_file():
        return None
    heldout = load_records(data_dir, "heldout")
    return {
        "heldout": build_dataset(heldout, tokenizer, spec),
        "train": build_dataset(training_slice(records, heldout), tokenizer, spec),
    }


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
