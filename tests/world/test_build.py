"""The tiny world folder: data splits, tokenizer shape (as Qwen2.5's), initial model; deterministic in the seed."""

import json

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from mars.pipeline.config import ConfigError
from mars.training.data import load_records
from mars.world.build import build_world

WORLD = {
    "kind": "tiny",
    "seed": 0,
    "train_per_family": 20,
    "test_per_family": 5,
    "vocab_size": 400,
    "heldout_per_family": 2,
    "sft_scales": [2],
    "model": {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
    },
}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    out = tmp_path_factory.mktemp("w") / "world"
    build_world(WORLD, out)
    return out


def test_world_layout_and_splits(world):
    train, test = load_records(world / "data", "train"), load_records(world / "data", "test")
    assert len(test) == 6 * 5
    assert {r["family"] for r in test} == {"ifeval", "bbh", "mmlu_pro", "gpqa", "gsm8k", "humaneval"}
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in test}
    assert all(isinstance(json.loads(r["target"]), (dict, list, str, int, float)) for r in test)
    assert (world / "world.json").is_file() and not (world.parent / "world.tmp").exists()


def test_a_larger_sft_set_doubles_each_familys_problems_and_keeps_the_facts(world):
    """The scaling study's ``sft_scales``: train_x2 holds 2x each family's problems, the default set as each
    family's prefix, the same fact records; the held-out records are in neither."""
    train, x2 = load_records(world / "data", "train"), load_records(world / "data", "train_x2")
    heldout = load_records(world / "data", "heldout")
    families = ["ifeval", "bbh", "mmlu_pro", "gpqa", "gsm8k", "humaneval"]
    for family in families:
        small = [r["prompt"] for r in train if r["family"] == family]
        large = [r["prompt"] for r in x2 if r["family"] == family]
        assert len(small) == 20 and len(large) == 40 and large[:20] == small, family
    facts = [[r["prompt"] for r in records if r["family"] not in families] for records in (train, x2)]
    assert facts[0] == facts[1] and len(facts[0]) > 0
    assert len(heldout) > 0 and not {r["prompt"] for r in heldout} & {r["prompt"] for r in x2}


def test_tokenizer_is_shaped_like_qwen(world):
    tokenizer = AutoTokenizer.from_pretrained(world / "init")
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.mask_token == "<|mask|>"
    assert len({tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.mask_token_id, tokenizer.bos_token_id}) == 4
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2 plus 3?"}], add_generation_prompt=True, tokenize=False
    )
    assert text == "<|im_start|>user\nWhat is 2 plus 3?<|im_end|>\n<|im_start|>assistant\n"
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.decode(ids) == text  # byte-level BPE round-trips
    # the mask token is one token and never produced by ordinary text
    assert tokenizer("<|mask|>")["input_ids"] == [tokenizer.mask_token_id]
    assert tokenizer.mask_token_id not in tokenizer("mask |mask| <mask>")["input_ids"]


def test_initial_model_loads_without_custom_code(world):
    model = AutoModelForCausalLM.from_pretrained(world / "init")
    tokenizer = AutoTokenizer.from_pretrained(world / "init")
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert model.config.vocab_size == len(tokenizer) and model.config.hidden_size == 32


def test_same_seed_same_world(world, tmp_path):
    build_world(WORLD, tmp_path / "again")
    assert (tmp_path / "again" / "data" / "train.jsonl").read_bytes() == (world / "data" / "train.jsonl").read_bytes()
    tokenizer = (world / "init" / "tokenizer.json").read_bytes()
    assert (tmp_path / "again" / "init" / "tokenizer.json").read_bytes() == tokenizer
    build_world({**WORLD, "seed": 1}, tmp_path / "other")
    assert (tmp_path / "other" / "data" / "train.jsonl").read_bytes() != (world / "data" / "train.jsonl").read_bytes()


def test_existing_output_is_refused(world):
    with pytest.raises(ConfigError, match="exists"):
        build_world(WORLD, world)
