"""``mars distill``: self-distilled targets (a model entry's ``targets: self_greedy``; beyond the paper).

Every record of ``<data>/<split>.jsonl`` gets the starting model's own greedy answer to its prompt (the project's
decoder, ``method="ar"``: plain greedy decoding, tau 1.0) in place of its gold ``response`` (kept as
``gold_response``); the held-out records are copied unchanged, so that the held-out loss stays measured against the
real references. The output folder is a data folder like the world's (``<split>.jsonl``, ``heldout.jsonl``) plus
``distill.json`` (what was generated, how many answers hit ``max_new_tokens`` without ending).

Work is done in chunks of the length-sorted records under ``<output>.work/`` (each written whole), so a killed job
resumes after its last finished chunk; the folder appears only when complete.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import torch

from mars.fileio import file_stats, write_json_atomic
from mars.pipeline.config import ConfigError
from mars.training.data import chat_ids, load_records, prompt_messages, write_jsonl

CHUNK = 256  # records per resumable piece of work


def prompt_ids(tokenizer, record: dict) -> list[int]:
    """The record's conversation before its answer, rendered with the chat template and the generation prompt:
    what the model sees before the answer it is trained on."""
    return chat_ids(tokenizer, prompt_messages(record), generation_prompt=True)


def distill(
    model_dir: str,
    data_dir: str,
    output: str,
    *,
    split: str = "train",
    batch_size: int = 32,
    max_new_tokens: int = 256,
    threads: int = 0,
) -> dict:
    """Write the self-distilled data folder ``output``; returns its summary (``distill.json``)."""
    from mars.decoding.engine import generate
    from mars.decoding.generation import load_model

    output_path = Path(output)
    if output_path.exists():
        raise ConfigError(f"output folder exists already (remove it first): {output}")
    if batch_size < 1 or max_new_tokens < 1:
        raise ConfigError(f"batch_size and max_new_tokens must be >= 1, got {batch_size} and {max_new_tokens}")
    records = load_records(data_dir, split)
    heldout = Path(data_dir) / "heldout.jsonl"
    if threads:
        torch.set_num_threads(threads)
    model, tokenizer = load_model(model_dir, dtype="float32", device="cpu" if not torch.cuda.is_available() else None)
    work = output_path.with_name(output_path.name + ".work")
    settings = {
        "model_files": file_stats(model_dir),
        "data_files": file_stats(data_dir, f"{split}.jsonl"),
        "split": split,
        "batch_size": batch_size,
        "max_new_tokens": max_new_tokens,
    }
    record_file = work / "settings.json"
    if record_file.is_file() and json.loads(record_file.read_text()) != json.loads(json.dumps(settings)):
        raise ConfigError(f"{work} holds work of another model, data or settings: remove it to start afresh")
    write_json_atomic(record_file, settings)

    ids = [prompt_ids(tokenizer, r) for r in records]
    order = sorted(range(len(records)), key=lambda i: (len(ids[i]), i))  # similar lengths share a batch
    chunks = [order[start : start + CHUNK] for start in range(0, len(order), CHUNK)]
    started = time.time()
    for number, chunk in enumerate(chunks):
        piece = work / f"chunk-{number:05d}.jsonl"
        if piece.is_file():
            continue
        answers = []
        for start in range(0, len(chunk), batch_size):
            batch = chunk[start : start + batch_size]
            outs = generate(
                model,
                [ids[i] for i in batch],
                method="ar",
                max_new_tokens=max_new_tokens,
                eos_token_ids=[tokenizer.eos_token_id],
                pad_token_id=tokenizer.pad_token_id,
            )
            for i, out in zip(batch, outs):
                ended = bool(out.token_ids) and out.token_ids[-1] == tokenizer.eos_token_id
                tokens = out.token_ids[:-1] if ended else out.token_ids
                answers.append(
                    {"index": i, "response": tokenizer.decode(tokens), "tokens": len(tokens), "ended": ended}
                )
        write_jsonl(piece, answers)
        print(f"mars distill: chunk {number + 1}/{len(chunks)} ({time.time() - started:.0f} s)", file=sys.stderr)

    answers = {}
    for number in range(len(chunks)):
        for line in (work / f"chunk-{number:05d}.jsonl").read_text().splitlines():
            answer = json.loads(line)
            answers[answer["index"]] = answer
    tmp = output_path.with_name(output_path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    write_jsonl(
        tmp / f"{split}.jsonl",
        ({**r, "response": answers[i]["response"], "gold_response": r["response"]} for i, r in enumerate(records)),
    )
    if heldout.is_file():
        shutil.copyfile(heldout, tmp / "heldout.jsonl")
    unchanged = sum(answers[i]["response"].strip() == r["response"].strip() for i, r in enumerate(records))
    summary = {
        "model": str(model_dir),
        "data": str(data_dir),
        "split": split,
        "records": len(records),
        "generated_tokens": sum(a["tokens"] for a in answers.values()),
        "not_ended": sum(not a["ended"] for a in answers.values()),
        "equal_to_gold": unchanged,
        "batch_size": batch_size,
        "max_new_tokens": max_new_tokens,
        "seconds_this_invocation": time.time() - started,
    }
    write_json_atomic(tmp / "distill.json", summary)
    os.replace(tmp, output_path)
    shutil.rmtree(work, ignore_errors=True)
    return summary
