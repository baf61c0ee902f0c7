"""Self-distilled targets (mars distill): each answer is the model's own greedy answer, as HF's greedy generate gives
it; the gold answer and the held-out references are kept; a killed job resumes to the same folder."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import mars.training.distill as distill_module
from mars.pipeline.config import ConfigError
from mars.training.data import load_records, write_jsonl
from mars.training.distill import distill, prompt_ids


@pytest.fixture
def data(small_init, tmp_path):
    records = load_records(small_init / "data", "train")[:10]
    write_jsonl(tmp_path / "data" / "train.jsonl", records)
    write_jsonl(tmp_path / "data" / "heldout.jsonl", records[:2])
    return tmp_path / "data"


def test_answers_are_hf_greedy_generate_and_the_references_are_kept(small_init, data, tmp_path):
    summary = distill(str(small_init / "init"), str(data), str(tmp_path / "out"), batch_size=3, max_new_tokens=6)
    tokenizer = AutoTokenizer.from_pretrained(small_init / "init")
    model = AutoModelForCausalLM.from_pretrained(small_init / "init").eval()
    gold = load_records(data, "train")
    out = load_records(tmp_path / "out", "train")
    assert len(out) == len(gold) == summary["records"]
    for record, distilled in zip(gold, out):
        ids = torch.tensor([prompt_ids(tokenizer, record)])
        with torch.no_grad():
            new = model.generate(
                ids,
                max_new_tokens=6,
                do_sample=False,
                eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id,
            )[0, ids.shape[1] :].tolist()
        if new and new[-1] == tokenizer.eos_token_id:
            new = new[:-1]
        assert distilled["response"] == tokenizer.decode(new)
        assert distilled["gold_response"] == record["response"]
        assert distilled["prompt"] == record["prompt"]
    assert (tmp_path / "out" / "heldout.jsonl").read_text() == (data / "heldout.jsonl").read_text()
    assert json.loads((tmp_path / "out" / "distill.json").read_text())["records"] == 10
    assert not (tmp_path / "out.work").exists()
    with pytest.raises(ConfigError, match="exists already"):
        distill(str(small_init / "init"), str(data), str(tmp_path / "out"))


def test_a_killed_job_resumes_after_its_last_chunk(small_init, data, tmp_path, monkeypatch):
    monkeypatch.setattr(distill_module, "CHUNK", 4)  # 10 records: chunks of 4, 4, 2
    args = (str(small_init / "init"), str(data))
    distill(*args, str(tmp_path / "straight"), batch_size=2, max_new_tokens=5)
    real = distill_module.write_jsonl
    written = []

    def dying(path, rows):
        if len(written) == 2:
            raise KeyboardInterrupt("killed")
        written.append(path)
        real(path, rows)

    monkeypatch.setattr(distill_module, "write_jsonl", dying)
    with pytest.raises(KeyboardInterrupt):
        distill(*args, str(tmp_path / "resumed"), batch_size=2, max_new_tokens=5)
    assert not (tmp_path / "resumed").exists()
    assert sorted(p.name for p in (tmp_path / "resumed.work").glob("chunk-*")) == [
        "chunk-00000.jsonl",
        "chunk-00001.jsonl",
    ]
    monkeypatch.setattr(distill_module, "write_jsonl", real)
    with pytest.raises(ConfigError, match="another model, data or settings"):  # its kept work is of other settings
        distill(*args, str(tmp_path / "resumed"), batch_size=2, max_new_tokens=4)
    distill(*args, str(tmp_path / "resumed"), batch_size=2, max_new_tokens=5)
    assert (tmp_path / "resumed" / "train.jsonl").read_text() == (tmp_path / "straight" / "train.jsonl").read_text()
