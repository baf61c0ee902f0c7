"""The benchmark's ``mars_lossless`` setting (Table 5): lossless self-speculative MARS at the benchmark's tau with
the cursor cache generates exactly the tokens of Hugging Face greedy ``generate``, in fewer forwards."""

import pytest

import mars.bench as bench
from mars.data import load_records
from mars.generation import encode_prompts, load_model
from tests.test_generation import hf_greedy


def test_the_lossless_setting_generates_exactly_the_greedy_tokens(trained_tiny, tmp_path, monkeypatch):
    calls = []
    real_generate = bench.generate

    def recording(model, prompts, **kwargs):
        outs = real_generate(model, prompts, **kwargs)
        calls.append({**kwargs, "prompts": [list(p) for p in prompts], "outs": outs})
        return outs

    monkeypatch.setattr(bench, "generate", recording)
    rows = bench.run_bench(
        str(trained_tiny["mars"]),
        str(trained_tiny["world"] / "data"),
        str(tmp_path / "bench"),
        batch_sizes=[3],
        num_prompts=6,
        tau=0.5,
        cache_block_sizes=[4],
        reps=1,
        max_new_tokens=32,
        results_dir=str(tmp_path),
    )
    lossless = [c for c in calls if c["method"] == "mars_lossless"]
    # warm-up and one timed pass, two batches of three prompts each
    assert len(lossless) == 4 and {(c["tau"], c["cache"], c["block_size"]) for c in lossless} == {(0.5, "cursor", 4)}
    model, tokenizer = load_model(trained_tiny["mars"])
    records = [r for r in load_records(trained_tiny["world"] / "data", "test") if r.get("family", "gsm8k") == "gsm8k"][
        :6
    ]
    prompts = encode_prompts(tokenizer, [r["prompt"] for r in records])
    assert [p for c in lossless[:2] for p in c["prompts"]] == prompts
    reference = hf_greedy(model, tokenizer, prompts[:3], 32) + hf_greedy(model, tokenizer, prompts[3:], 32)
    for c in lossless:
        start = prompts.index(c["prompts"][0])
        assert [o.token_ids for o in c["outs"]] == reference[start : start + 3]
    # the same tokens as MARS in one-token mode; fewer forwards than tokens (drafts were accepted)
    row = {r["setting"]: r for r in rows}
    assert row["mars_lossless"]["tokens"] == row["mars_tau1"]["tokens"] == sum(map(len, reference))
    assert row["mars_lossless"]["tokens_per_forward"] > 1.0
    assert row["mars_tau1"]["tokens_per_forward"] == pytest.approx(1.0)
