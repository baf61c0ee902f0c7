"""``mars world``: build the tiny offline world into one folder.

    <out>/data/train.jsonl, <out>/data/test.jsonl   the six synthetic task families (mars.world.tasks): SFT / test
    <out>/data/pretrain.jsonl                       the base model's plain-LM corpus (``pretrain_per_family`` > 0)
    <out>/data/heldout.jsonl                        ``heldout_per_family`` problems per family in no training set:
                                                    every training run logs its next-token loss on them
    <out>/data/train_x<k>.jsonl                     the scaling study's larger SFT sets (``sft_scales``)
    <out>/init/                                     tokenizer + randomly initialised Qwen2ForCausalLM
                                                    (a save_pretrained folder; the "base" model is pre-trained
                                                    from it as a plain LM)

The folder is written under ``<out>.tmp`` and renamed when complete.  Everything is a pure function of the
``world`` section of the config, so the same seed rebuilds the same world.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from mars.pipeline.config import ConfigError, validate_section
from mars.training.data import write_jsonl
from mars.world.tokenizer import train_tokenizer


def render(tokenizer, record: dict) -> str:
    messages = [{"role": "user", "content": record["prompt"]}, {"role": "assistant", "content": record["response"]}]
    return tokenizer.apply_chat_template(messages, tokenize=False)


def tiny_model(tokenizer, model_fields: dict, seed: int) -> Qwen2ForCausalLM:
    fields = validate_section("world", {"kind": "tiny", "model": model_fields})["model"]
    if fields["hidden_size"] % fields["num_attention_heads"]:
        raise ConfigError("config key 'world.model.hidden_size': must be divisible by num_attention_heads")
    if fields["num_attention_heads"] % fields["num_key_value_heads"]:
        raise ConfigError("config key 'world.model.num_key_value_heads': must divide num_attention_heads")
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        tie_word_embeddings=True,
        rope_theta=10000.0,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **fields,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def build_world(world: dict, out: str | Path) -> dict:
    if world.get("kind", "tiny") != "tiny":
        raise ConfigError("mars world builds the tiny world only; an hf world starts from its hub checkpoint")
    world = validate_section("world", {"kind": "tiny", **world})  # the schema's defaults filled in
    out = Path(out)
    if out.exists():
        raise ConfigError(f"world folder exists already (remove it first): {out}")
    from mars.world.tasks import make_heldout, make_pretrain, make_splits, make_train

    seed = world["seed"]
    train, test = make_splits(world["train_per_family"], world["test_per_family"], seed=seed)
    pretrain = make_pretrain(world["pretrain_per_family"], seed=seed) if world["pretrain_per_family"] else []
    # the scaling study's larger SFT sets (each holds the default set as its per-family prefix)
    scaled = {k: make_train(world["train_per_family"] * k, seed=seed) for k in world["sft_scales"]}
    trained = {r["prompt"] for records in [train, pretrain, *scaled.values()] for r in records}
    heldout = make_heldout(world["heldout_per_family"], seed, trained) if world["heldout_per_family"] else []
    for record in [*train, *test, *pretrain, *heldout, *(r for records in scaled.values() for r in records)]:
        record["target"] = json.dumps(record["target"], sort_keys=True)  # one Arrow-friendly schema (lm-eval)

    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    write_jsonl(tmp / "data" / "train.jsonl", train)
    write_jsonl(tmp / "data" / "test.jsonl", test)
    if pretrain:
        write_jsonl(tmp / "data" / "pretrain.jsonl", pretrain)
    if heldout:
        write_jsonl(tmp / "data" / "heldout.jsonl", heldout)
    for k, records in scaled.items():
        write_jsonl(tmp / "data" / f"train_x{k}.jsonl", records)
    # The tokenizer is trained on the training split only (the test split stays unseen).
    corpus = [r["prompt"] + "\n" + r["response"] for r in train]
    tokenizer = train_tokenizer(corpus, world["vocab_size"])
    model = tiny_model(tokenizer, world["model"], seed)
    model.save_pretrained(tmp / "init", safe_serialization=True)
    tokenizer.save_pretrained(tmp / "init")
    lengths = [len(tokenizer(render(tokenizer, r))["input_ids"]) for r in train]
    summary = {
        "train_examples": len(train),
        "test_examples": len(test),
        "pretrain_examples": len(pretrain),
        "heldout_examples": len(heldout),
        **{f"train_x{k}_examples": len(records) for k, records in scaled.items()},
        "vocab_size": len(tokenizer),
        "parameters": sum(p.numel() for p in model.parameters()),
        "mean_train_tokens": sum(lengths) / len(lengths),
        "max_train_tokens": max(lengths),
    }
    (tmp / "world.json").write_text(json.dumps({"world": world, "summary": summary}, indent=2))
    os.replace(tmp, out)
    return summary
