"""The jobs that lossless self-speculative MARS adds, run on the briefly trained tiny checkpoint: the sweep's
``mars_lossless`` evaluation job (Table 8, Figure 3) scores exactly what greedy decoding (MARS at tau = 1.0) scores,
with the same generations, in fewer forwards; the benchmark's ``mars_lossless`` setting (Table 5) generates
exactly the tokens of Hugging Face greedy ``generate``."""

import json
from pathlib import Path

import pytest
import yaml

import mars.bench.wallclock as bench
from mars.decoding.generation import encode_prompts, load_model
from mars.pipeline import experiments as X
from mars.pipeline import jobs as J
from mars.pipeline.config import validate
from mars.training.data import load_records
from tests.test_generation import hf_greedy

ROOT = Path(__file__).resolve().parent.parent


def test_the_lossless_sweep_job_scores_exactly_what_greedy_decoding_scores(trained_tiny, tmp_path):
    from mars.evaluation.evaluate import evaluate

    cfg = validate(yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text()))
    [setting] = [s for s in X.table_settings(cfg, "table8") if s.method == "mars_lossless"]
    records = {}
    for s in (setting, X.Setting(setting.model, "mars", 1.0, setting.metric, "sweep")):
        job = J.eval_job(cfg, s.model, s.method, s.tau, s.metric, s.kind)  # as the workflow hands it to mars eval
        assert job["tasks"] == "tiny_gsm8k,tiny_humaneval" and job["block_size"] == 4
        # (not the smoke config's experiment: the session's MLflow store would then keep this test's artifact
        # folder for it, and the smoke pipeline's runs would log their artifacts there)
        job["experiment"] = "test-lossless-jobs"
        out = tmp_path / s.name
        evaluate(
            model=trained_tiny["mars"],
            data=trained_tiny["world"] / "data",
            output=out / "{family}.json",
            results_dir=tmp_path / "mlruns",
            device="cpu",
            **job,
        )
        records[s.method] = {f: json.loads((out / f"{f}.json").read_text()) for f in X.SWEEP_FAMILIES}
    lossless, greedy = records["mars_lossless"], records["mars"]
    for family in X.SWEEP_FAMILIES:
        a, b = lossless[family], greedy[family]
        assert a["model_args"]["method"] == "mars_lossless" and a["model_args"]["tau"] == setting.tau
        assert [s["token_ids"] for s in a["samples"]] == [s["token_ids"] for s in b["samples"]]
        assert [s["generation"] for s in a["samples"]] == [s["generation"] for s in b["samples"]]
        assert a["metrics"] == b["metrics"]
        assert b["decoding"]["tokens_per_forward"] == pytest.approx(1.0)
    # drafts were accepted: several tokens per forward over the two tasks
    forwards = sum(lossless[f]["decoding"]["forwards"] for f in X.SWEEP_FAMILIES)
    assert sum(lossless[f]["decoding"]["generated_tokens"] for f in X.SWEEP_FAMILIES) > forwards


def test_the_lossless_bench_setting_generates_exactly_the_greedy_tokens(trained_tiny, tmp_path, monkeypatch):
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
        cache_block_sizes=[4, 8],
        reps=1,
        max_new_tokens=32,
        results_dir=str(tmp_path),
        settings=["ar_hf_kv", "mars_tau1", "mars_authors_block", "mars_cursor", "mars_lossless"],
    )
    # only the decoders asked for are timed, the authors' block cache at each cache block size
    assert [r["setting"] for r in rows] == [
        "ar_hf_kv",
        "mars_tau1",
        "mars_authors_block_4",
        "mars_authors_block_8",
        "mars_cursor",
        "mars_lossless",
    ]
    assert {c["cache"] for c in calls} == {"cursor", "authors_block"}
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
