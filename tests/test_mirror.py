"""`mars mirror`: the local stand-ins of Qwen2.5-Instruct and Dolci-Instruct-SFT load like the hub ids, offline."""

import json
import shutil

import pytest

from mars.pipeline.mirror import DEFAULT_SYSTEM_PROMPT, SHAPES, build_mirror, sft_records

RECORDS = 60


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    out = tmp_path_factory.mktemp("mirror") / "m"
    summary = build_mirror(out, list(SHAPES), records=RECORDS, seed=0)
    return out, summary


def model_dir(mirror, key):
    return mirror[0] / "models" / SHAPES[key].folder


@pytest.mark.parametrize("key,tied", [("0.5b", True), ("7b", False)])
def test_snapshot_loads_by_path_offline_like_a_hub_checkpoint(mirror, key, tied, offline_hub):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = model_dir(mirror, key)
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert type(model).__name__ == "Qwen2ForCausalLM" and type(tokenizer).__name__ == "Qwen2Tokenizer"
    assert model.dtype == torch.bfloat16  # the real checkpoints are bf16 too
    assert model.config.tie_word_embeddings is tied
    same = model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert same is tied
    assert model.config.hidden_size == SHAPES[key].hidden_size
    # the hub's generation config samples: greedy decoding has to be asked for, as with the real model
    gen = model.generation_config
    assert gen.do_sample is True and gen.top_k == 20
    assert sorted(gen.eos_token_id) == sorted(tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"]))


def test_special_tokens_are_qwens_and_have_embedding_rows(mirror, offline_hub):
    from transformers import AutoConfig, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir(mirror, "0.5b"))
    assert tokenizer.pad_token == "<|endoftext|>" and tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.bos_token is None and tokenizer.unk_token is None
    assert tokenizer.mask_token is None  # the config names the mask token (world.mask_token), as for the real one
    names = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|fim_pad|>"]
    ids = tokenizer.convert_tokens_to_ids(names)
    # Qwen's order: the three chat tokens come first after the BPE vocabulary, <|fim_pad|> 19 after <|endoftext|>
    assert ids[1] == ids[0] + 1 and ids[2] == ids[0] + 2 and ids[3] == ids[0] + 19
    assert ids[0] == len(tokenizer) - 22  # 14 special + 8 plain added tokens close the vocabulary
    # each is one token in running text, and <|fim_pad|> is not special (decoding keeps it), as in Qwen2.5
    encoded = tokenizer("a<|im_start|>b<|fim_pad|>c<|im_end|>")["input_ids"]
    assert ids[1] in encoded and ids[3] in encoded and ids[2] in encoded
    assert "<|fim_pad|>" in tokenizer.decode(encoded, skip_special_tokens=True)
    assert "<|im_start|>" not in tokenizer.decode(encoded, skip_special_tokens=True)
    for key in SHAPES:
        rows = AutoConfig.from_pretrained(model_dir(mirror, key)).vocab_size
        assert max(ids) < len(tokenizer) < rows  # padded embedding rows beyond the tokenizer, as Qwen's


def test_chat_template_renders_chatml_with_qwens_default_system_prompt(mirror, offline_hub):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir(mirror, "7b"))
    messages = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "2+2?"},
    ]
    expected = (
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello!<|im_end|>\n"
        "<|im_start|>user\n2+2?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == expected
    assert DEFAULT_SYSTEM_PROMPT in expected
    own_system = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert (
        tokenizer.apply_chat_template(own_system, tokenize=False)
        == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
    )


def test_sft_data_set_loads_offline_in_dolcis_schema(mirror, offline_hub):
    from datasets import load_dataset
    from transformers import AutoTokenizer

    folder = mirror[0] / "datasets" / "Dolci-Instruct-SFT"
    dataset = load_dataset(str(folder), split="train")
    assert set(dataset.column_names) == {"id", "messages", "source"} and len(dataset) == RECORDS
    assert len(set(dataset["id"])) == RECORDS
    rows = list(dataset)
    assert rows == sft_records(RECORDS, seed=0)  # a pure function of the seed
    for row in rows:
        roles = [m["role"] for m in row["messages"]]
        assert all(set(m) == {"role", "content"} for m in row["messages"])
        assert roles[-1] == "assistant" and set(roles) <= {"system", "user", "assistant"}
        assert "system" not in roles[1:]
    assert any(sum(m["role"] == "user" for m in r["messages"]) >= 2 for r in rows)  # multi-turn
    assert any(sum(m["role"] == "user" for m in r["messages"]) == 3 for r in rows)
    assert any(r["messages"][0]["role"] == "system" for r in rows)
    tokenizer = AutoTokenizer.from_pretrained(model_dir(mirror, "0.5b"))
    lengths = [len(tokenizer.apply_chat_template(r["messages"], tokenize=True)["input_ids"]) for r in rows]
    too_long = sum(n > 512 for n in lengths)
    assert 0 < too_long < len(rows) // 5  # the max_length filter has something to drop, and most stay


def test_export_hf_sft_reads_the_mirror(mirror, tmp_path, offline_hub):
    """The world rule's path: `mars world` of an hf world whose data set is the mirror folder."""
    from datasets import load_dataset

    from mars.training.data import export_hf_sft, read_jsonl

    folder = str(mirror[0] / "datasets" / "Dolci-Instruct-SFT")
    world = {"kind": "hf", "base_model": str(model_dir(mirror, "0.5b")), "dataset": folder, "split": "train"}
    world["mask_token"] = "<|fim_pad|>"
    summary = export_hf_sft(world, tmp_path / "world")
    records = read_jsonl(tmp_path / "world" / "data" / "train.jsonl")
    rows = list(load_dataset(folder, split="train"))
    assert summary["train_examples"] == len(records) == RECORDS
    for record, row in zip(records, rows):  # the conversation before the last answer, and that answer
        assert record["messages"] == row["messages"][:-1]
        assert record["response"] == row["messages"][-1]["content"]


def test_export_hf_sft_holds_out_every_nth_conversation(mirror, tmp_path, offline_hub):
    """world.heldout_every: every n-th usable conversation goes to heldout.jsonl (the held-out next-token loss of
    every training run) and not to train.jsonl; the rest keep their order."""
    from mars.training.data import export_hf_sft, read_jsonl

    folder = str(mirror[0] / "datasets" / "Dolci-Instruct-SFT")
    world = {"kind": "hf", "base_model": str(model_dir(mirror, "0.5b")), "dataset": folder, "split": "train"}
    world.update(mask_token="<|fim_pad|>", heldout_every=3)
    summary = export_hf_sft(world, tmp_path / "world")
    train = read_jsonl(tmp_path / "world" / "data" / "train.jsonl")
    heldout = read_jsonl(tmp_path / "world" / "data" / "heldout.jsonl")
    assert summary["heldout_examples"] == len(heldout) == RECORDS // 3
    assert summary["train_examples"] == len(train) == RECORDS - RECORDS // 3
    plain = dict(world)
    plain.pop("heldout_every")
    export_hf_sft(plain, tmp_path / "plain")
    records = read_jsonl(tmp_path / "plain" / "data" / "train.jsonl")
    assert heldout == records[2::3]
    assert train == [r for i, r in enumerate(records) if i % 3 != 2]


def test_cli_mirror_writes_one_shape_and_refuses_an_existing_folder(tmp_path, capsys):
    from mars.cli import main

    out = tmp_path / "m"
    assert main(["mirror", "--output", str(out), "--shape", "0.5b", "--records", "20"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert list(summary["models"]) == ["Qwen/Qwen2.5-0.5B-Instruct"]
    assert sorted(p.name for p in (out / "models").iterdir()) == ["Qwen2.5-0.5B-Instruct"]
    assert (out / "paper-0.5b-mirror.yaml").is_file() and not (out / "paper-7b-mirror.yaml").exists()
    assert main(["mirror", "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "exists already" in err[0]
    assert main(["mirror", "--output", str(tmp_path / "n"), "--records", "5"]) == 2
    assert not (tmp_path / "n").exists() and not (tmp_path / "n.tmp").exists()


def test_export_hf_sft_reads_a_regenerated_local_folder_afresh(tmp_path, offline_hub):
    """A local data set folder rewritten with other records (a rebuilt mirror) is exported as it is now, never from
    a `datasets` cache prepared from an earlier version of the folder."""
    from mars.pipeline.mirror import write_dataset
    from mars.training.data import export_hf_sft, read_jsonl

    folder = tmp_path / "datasets" / "Dolci-Instruct-SFT"
    world = {"kind": "hf", "dataset": str(folder), "split": "train"}
    for count in (20, 40):
        shutil.rmtree(folder, ignore_errors=True)
        write_dataset(folder, sft_records(count, seed=count))
        out = tmp_path / f"world{count}"
        assert export_hf_sft(world, out)["train_examples"] == count
        assert len(read_jsonl(out / "data" / "train.jsonl")) == count


def test_export_hf_sft_without_a_usable_conversation_is_one_error_and_no_file(tmp_path, offline_hub):
    """The export streams records to the file; a data set with no usable conversation (no assistant answer last)
    is one error, and no train.jsonl (complete or partial) is left."""
    from mars.pipeline.config import ConfigError
    from mars.pipeline.mirror import write_dataset
    from mars.training.data import export_hf_sft

    folder = tmp_path / "datasets" / "unanswered"
    records = [r for r in sft_records(20, seed=1)]
    for r in records:
        r["messages"] = r["messages"][:-1]  # drop the final assistant answer
    write_dataset(folder, records)
    with pytest.raises(ConfigError, match="no usable conversations"):
        export_hf_sft({"kind": "hf", "dataset": str(folder), "split": "train"}, tmp_path / "world")
    assert not list((tmp_path / "world").rglob("*.jsonl*")) if (tmp_path / "world").exists() else True


def test_the_7b_mirror_writes_the_05b_stand_in_for_its_draft(tmp_path):
    """Table 6 at 7B drafts with Qwen2.5-0.5B-Instruct: the 7B mirror writes that stand-in too (one tokenizer for
    both) and its overlay points the draft entry's base_model at it."""
    import yaml
    from transformers import AutoTokenizer

    out = tmp_path / "m"
    summary = build_mirror(out, ["7b"], records=20, seed=0)
    assert sorted(summary["models"]) == ["Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-7B-Instruct"]
    small, large = (out / "models" / SHAPES[k].folder for k in ("0.5b", "7b"))
    assert AutoTokenizer.from_pretrained(small).get_vocab() == AutoTokenizer.from_pretrained(large).get_vocab()
    keys = yaml.safe_load((out / "paper-7b-mirror.yaml").read_text())
    assert keys["models"] == {"draft_ar_sft_5ep": {"base_model": str(small.resolve())}}
    assert keys["world"]["base_model"] == str(large.resolve())
    assert not (out / "paper-0.5b-mirror.yaml").exists()
