"""Table 6 end to end on tiny random models: ``mars speculate`` (mars/bench/speculative.py), the fresh smaller draft of
a model entry's ``architecture`` (mars.training.train.fresh_model) and the cut one of its ``layers``, the scoring of
the completions, and the table's layout.

Independent expectations: Hugging Face greedy ``generate`` of the target (the AR-target and lossless rows must
reproduce it); counters added up from the rows' own token lists; the tiny gsm8k family's scorer and the harness's
own gsm8k answer on hand-written completions; AutoModelForCausalLM loading the fresh model back.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from mars.cli import main as cli_main
from mars.training.data import write_jsonl

pytestmark = pytest.mark.usefixtures("single_thread")

DRAFT_SHAPE = {
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
}


def test_architecture_makes_a_fresh_model_of_that_shape(small_init, tmp_path):
    from mars.training.train import fresh_model

    init = small_init / "init"
    model = fresh_model(str(init), DRAFT_SHAPE, seed=3)
    model.save_pretrained(tmp_path / "draft")
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "draft")
    for key, value in DRAFT_SHAPE.items():
        assert getattr(loaded.config, key) == value
    assert len(loaded.model.layers) == 1
    assert loaded.model.layers[0].self_attn.k_proj.out_features == 8  # 1 kv head of 16 / 2 = 8 dims
    base = AutoModelForCausalLM.from_pretrained(init)
    assert loaded.config.vocab_size == base.config.vocab_size  # the same tokenizer
    # seeded: the same seed gives the same weights, another seed others
    same, other = fresh_model(str(init), DRAFT_SHAPE, seed=3), fresh_model(str(init), DRAFT_SHAPE, seed=4)
    weights = dict(loaded.named_parameters())
    assert all(torch.equal(p, weights[n]) for n, p in same.named_parameters())
    assert not all(torch.equal(p, weights[n]) for n, p in other.named_parameters())


def test_train_with_architecture_trains_the_fresh_model(small_init, tmp_path):
    from mars.pipeline.config import TrainSpec
    from mars.training.train import train

    spec = TrainSpec(method="ar", init="world", architecture=DRAFT_SHAPE, max_steps=2, batch_size=8, save_steps=100)
    train(spec, init=str(small_init / "init"), data_dir=str(small_init / "data"), output=str(tmp_path / "m"))
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "m")
    assert model.config.hidden_size == 16 and model.config.num_hidden_layers == 1
    assert json.loads((tmp_path / "m" / "run_config.json").read_text())["spec"]["architecture"] == DRAFT_SHAPE


def test_layers_keeps_the_first_layers_of_the_trained_init(small_init, tmp_path):
    """A model entry's ``layers``: the cut model's logits are the full model's after its first n layers, put through
    its own final norm and output layer (HF's hidden states of the full model: an independent computation)."""
    from mars.pipeline.config import ConfigError, TrainSpec
    from mars.training.train import load_init

    init = small_init / "init"
    model, _ = load_init(str(init), TrainSpec(method="ar", init="x", layers=1))
    model.save_pretrained(tmp_path / "cut")
    cut = AutoModelForCausalLM.from_pretrained(tmp_path / "cut").eval()
    assert cut.config.num_hidden_layers == 1 and len(cut.model.layers) == 1
    full = AutoModelForCausalLM.from_pretrained(init).eval()
    ids = torch.tensor([[5, 17, 42, 9, 100, 3]])
    with torch.no_grad():
        after_one = full(ids, output_hidden_states=True).hidden_states[1]
        expected = full.lm_head(full.model.norm(after_one))
        assert torch.allclose(cut(ids).logits, expected, atol=1e-5)
    for n in (0, 2):  # (a cut must keep at least one layer and drop at least one of the init's 2)
        with pytest.raises(ConfigError, match=rf"layers: {n}, but .* has 2 decoder layers \(keep 1 to 1\)"):
            load_init(str(init), TrainSpec(method="ar", init="x", layers=n))


@pytest.fixture(scope="module")
def spec_setup(small_init, tmp_path_factory):
    """A GSM8K-like test split and two checkpoints of one tokenizer: the random init as target, a smaller fresh
    model as draft (random models: every counter is exercised, the answers are wrong)."""
    from mars.training.train import fresh_model

    root = tmp_path_factory.mktemp("spec")
    records = [
        {
            "family": "gsm8k",
            "id": str(i),
            "prompt": f"What is {i} plus {i + 1}?",
            "response": "",
            "target": {"answer": str(2 * i + 1)},
        }
        for i in range(3)
    ]
    write_jsonl(root / "data" / "test.jsonl", records)
    tokenizer = AutoTokenizer.from_pretrained(small_init / "init")
    draft = fresh_model(str(small_init / "init"), DRAFT_SHAPE, seed=1)
    draft.save_pretrained(root / "draft")
    tokenizer.save_pretrained(root / "draft")
    return {"root": root, "target": small_init / "init", "draft": root / "draft", "tokenizer": tokenizer}


def hf_greedy(path, tokenizer, prompts, max_new_tokens):
    from mars.decoding.generation import encode_prompts

    model = AutoModelForCausalLM.from_pretrained(path).eval()
    out = []
    for ids in encode_prompts(tokenizer, prompts):
        with torch.inference_mode():
            gen = model.generate(
                torch.tensor([ids]),
                do_sample=False,
                max_new_tokens=max_new_tokens,
                eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id,
            )[0, len(ids) :].tolist()
        out.append(gen[: gen.index(tokenizer.eos_token_id) + 1] if tokenizer.eos_token_id in gen else gen)
    return out


@pytest.fixture(scope="module")
def spec_run(spec_setup):
    """``mars speculate`` once on the module's checkpoints: its output folder (read by the rows and Table 6 tests)."""
    out = spec_setup["root"] / "out"
    settings = {"k": 3, "tau": 0.5, "num_prompts": 3, "max_new_tokens": 10, "block_size": 4, "threads": 1}
    assert speculate(spec_setup, out, settings) == 0
    return out


def speculate(s: dict, out, settings: dict, draft_mars=None) -> int:
    """``mars speculate`` on the module's target (AR and MARS roles alike) and draft; its exit status."""
    return cli_main(
        [
            "speculate",
            "--target-ar", str(s["target"]),
            "--target-mars", str(s["target"]),
            "--draft-ar", str(s["draft"]),
            "--draft-mars", str(draft_mars or s["draft"]),
            "--data", str(s["root"] / "data"),
            "--output", str(out),
            "--job", json.dumps(settings),
        ]
    )  # fmt: skip


def test_speculate_rows_add_up_and_lossless_rows_are_the_targets_greedy_output(spec_setup, spec_run):
    s, out = spec_setup, spec_run
    meta = json.loads((out / "spec.json").read_text())
    rows = {r["row"]: r for r in pd.read_csv(out / "spec.csv").to_dict("records")}
    assert list(rows) == ["target_ar_tau1", "target_mars_tau1", "ar_ar", "ar_mars", "mars_mars", "lossless"]
    greedy = hf_greedy(s["target"], s["tokenizer"], [f"What is {i} plus {i + 1}?" for i in range(3)], 10)
    for name in ("target_ar_tau1", "target_mars_tau1", "ar_ar", "lossless"):
        assert meta["token_ids"][name] == greedy, name
        assert rows[name]["identical_to_target_tau1"] == 1.0
        assert rows[name]["accuracy_change_vs_target_tau1"] == 0.0
    for name, r in rows.items():
        tokens = meta["token_ids"][name]
        assert r["tokens"] == sum(map(len, tokens))
        assert r["tokens_per_target_forward"] == pytest.approx(r["tokens"] / r["target_forwards"])
        assert r["extra_tokens_per_target_forward"] * r["target_forwards"] == pytest.approx(
            r["tokens"] - r["drafts_accepted"]
        )
        assert r["drafts_accepted"] <= r["drafts_proposed"]
        assert r["tokens_per_s"] == pytest.approx(r["tokens"] / r["time_s"])
        # the paper's speed-up is a time ratio on the same prompts (582 s / 457 s = 1.27x), not a tokens/s ratio
        assert r["speedup_vs_ar_ar"] == pytest.approx(rows["ar_ar"]["time_s"] / r["time_s"])
    for name in ("target_ar_tau1", "target_mars_tau1"):  # alone at tau 1: one token per forward, no drafts
        assert rows[name]["target_forwards"] == rows[name]["tokens"] and rows[name]["draft_forwards"] == 0
    # an AR draft makes one forward per proposed token; each speculative forward proposes at most k
    assert rows["ar_ar"]["draft_forwards"] == rows["ar_ar"]["drafts_proposed"]
    assert rows["ar_ar"]["drafts_proposed"] <= 3 * rows["ar_ar"]["target_forwards"]
    assert rows["lossless"]["draft_forwards"] == 0  # its drafts are the target's own mask predictions


def test_the_completions_are_scored_as_the_evaluation_scores_them(spec_setup, tmp_path):
    from mars.bench.speculative import harness_task, world_task
    from mars.world.tasks import score

    texts, until, world_score = world_task(str(spec_setup["root"] / "data"), 2)
    assert texts == ["What is 0 plus 1?", "What is 1 plus 2?"] and until == ["<|im_end|>"]
    assert world_score("0 + 1 = 1. #### 1", 0) == score("gsm8k", "0 + 1 = 1. #### 1", {"answer": "1"})["exact_match"]
    assert world_score("#### 1", 0) == 1.0 and world_score("#### 2", 0) == 0.0
    # paper scale: the harness's gsm8k_cot_zeroshot, its flexible-extract filter (the last number) and exact_match
    mirror = tmp_path / "openai" / "gsm8k" / "main"
    write_jsonl(mirror / "test.jsonl", [{"question": "2 apples and 16 more?", "answer": "2 + 16 = 18\n#### 18"}])
    write_jsonl(mirror / "train.jsonl", [{"question": "q", "answer": "#### 1"}])
    texts, until, paper_score = harness_task(str(tmp_path), 5)
    assert texts == ["Q: 2 apples and 16 more?\nA: Let's think step by step."]
    assert "Q:" in until
    assert paper_score("2 + 16 = 18. The answer is 18.", 0) == 1.0
    assert paper_score("The answer is 18, not 17.", 0) == 0.0  # flexible-extract takes the last number
    assert paper_score("no number here", 0) == 0.0


def test_table6_lays_out_the_rows_with_the_papers_numbers(spec_run, tmp_path):
    from mars.report.tables import make_table

    spec_csv = spec_run / "spec.csv"
    job = {"table": "table6", "rows": [], "paper_model_size": "7B", "experiment": "t", "models": {}}
    # the CSV names checkpoints by path here (no config names): every name must be one of the job's models
    names = set(pd.read_csv(spec_csv).target_model) | set(pd.read_csv(spec_csv).draft_model.dropna())
    job["models"] = {n: {"trained": {}, "init": None} for n in names}
    frame = make_table(job, None, tmp_path / "table6.csv", bench_csv=spec_csv)
    by_row = frame.set_index("row")
    assert by_row.loc["ar_ar", "paper_speedup"] == 1.0 and by_row.loc["ar_mars", "paper_speedup"] == 1.27
    assert by_row.loc["mars_mars", "paper_tokens_per_target_forward"] == 4.07
    assert by_row.loc["ar_mars", "paper_gsm8k_change_vs_target_tau1"] == 1.4
    assert pd.isna(by_row.loc["lossless", "paper_speedup"]) and pd.isna(by_row.loc["target_ar_tau1", "paper_speedup"])
    assert (tmp_path / "table6.md").read_text().startswith("Table 6:")
    job["models"] = {}
    with pytest.raises(Exception, match="not one of this config's Table 6"):
        make_table(job, None, tmp_path / "bad.csv", bench_csv=spec_csv)


def test_the_rehearsal_check_expects_table6_of_the_7b_config_only():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "check_rehearsal.py"
    spec = importlib.util.spec_from_file_location("check_rehearsal", path)
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    assert "table6" in check.expected_tables(Path("out/results/paper-7b-mirror/tables"))
    assert "table6" not in check.expected_tables(Path("out/results/paper-0.5b-mirror/tables"))
    assert "speedup_vs_ar_ar" in check.reference_columns("table6")


def test_a_mars_draft_trained_with_another_block_size_is_one_error(spec_setup, tmp_path, capsys):
    import shutil

    s = spec_setup
    draft = tmp_path / "draft_b8"
    shutil.copytree(s["draft"], draft)
    (draft / "run_config.json").write_text(json.dumps({"spec": {"method": "mars", "block_size": 8}}))
    settings = {"k": 2, "tau": 0.5, "num_prompts": 1, "max_new_tokens": 4, "block_size": 4, "threads": 1}
    assert speculate(s, tmp_path / "out", settings, draft_mars=draft) != 0
    err = capsys.readouterr().err
    assert "draft_mars" in err and "trained with block size 8, not 4" in err, err
    assert not (tmp_path / "out" / "spec.csv").exists()
