"""The lossless self-speculative MARS rows of Table 8 / Figure 3 (``eval.lossless_models``): which evaluation jobs
they add, with which settings, and that they change no job that existed without them."""

import re

import pytest

from mars.pipeline import experiments as X
from mars.pipeline import jobs as J
from mars.pipeline.config import ConfigError
from tests.test_experiments import config


def lossless(cfg) -> list[X.Setting]:
    return [s for s in X.all_settings(cfg) if s.method == "mars_lossless"]


def test_the_default_config_decodes_its_lossless_model_at_the_sweep_taus_below_one():
    cfg = config()
    assert cfg["eval"]["lossless_models"] == ["mars_b4"]
    below_one = [t for t in cfg["eval"]["sweep_taus"] if t < 1.0]
    assert len(below_one) == len(cfg["eval"]["sweep_taus"]) - 1  # tau 1.0: plain greedy, the MARS row's job
    assert lossless(cfg) == [X.Setting("mars_b4", "mars_lossless", t, "probability", "sweep") for t in below_one]
    setting = X.Setting("mars_b4", "mars_lossless", 0.5, "probability", "sweep")
    assert setting.files("results/tiny") == [
        "results/tiny/sweep/mars_b4/mars_lossless-tau0.5-probability/gsm8k.json",
        "results/tiny/sweep/mars_b4/mars_lossless-tau0.5-probability/humaneval.json",
    ]
    assert X.parse_setting(setting.name) == ("mars_lossless", 0.5, "probability")  # (the "_" is no separator)
    job = J.eval_job(cfg, "mars_b4", "mars_lossless", 0.5, "probability", "sweep")
    assert (job["method"], job["tau"], job["block_size"], job["tasks"]) == (
        "mars_lossless",
        0.5,
        4,
        "tiny_gsm8k,tiny_humaneval",
    )


def test_lossless_models_decode_with_their_trained_block_size_and_follow_the_bench_model_by_default():
    cfg = config(edit=lambda c: c["eval"].update(lossless_models=["mars_b16", "mars_nolar_b8"]))
    assert {s.model for s in lossless(cfg)} == {"mars_b16", "mars_nolar_b8"}
    assert J.eval_job(cfg, "mars_b16", "mars_lossless", 0.8, "probability", "sweep")["block_size"] == 16
    assert J.eval_job(cfg, "mars_nolar_b8", "mars_lossless", 0.8, "probability", "sweep")["block_size"] == 8
    with pytest.raises(ConfigError, match="not a MARS"):
        J.decoding_block_size(cfg, "ar_sft_5ep", "mars_lossless")
    # null (the schema's default): the benchmark's model
    cfg = config(edit=lambda c: [c["eval"].pop("lossless_models"), c["bench"].update(model="mars_b8")])
    assert cfg["eval"]["lossless_models"] is None and {s.model for s in lossless(cfg)} == {"mars_b8"}
    assert not lossless(config(edit=lambda c: c["eval"].update(lossless_models=[])))
    # only taus below 1.0, whatever the sweep's are
    cfg = config("configs/smoke.yaml", edit=lambda c: c["eval"].update(sweep_taus=[1.0]))
    assert not lossless(cfg)


@pytest.mark.parametrize(
    "edit,key",
    [
        (lambda c: c["eval"].update(lossless_models=["mars_b4", "nope"]), "eval.lossless_models[1]"),
        (lambda c: c["eval"].update(lossless_models=["ar_sft_5ep"]), "eval.lossless_models[0]"),
    ],
)
def test_a_lossless_model_must_be_a_mars_entry(edit, key):
    with pytest.raises(ConfigError, match=re.escape(f"config key '{key}'")):
        config(edit=edit)


@pytest.mark.parametrize("name", ["config.yaml", "configs/smoke.yaml", "configs/paper-0.5b.yaml"])
def test_lossless_rows_add_jobs_and_change_none(name):
    """Without lossless models the declaration is the one before them (Table 8's MARS rows, every job's settings);
    with them, every job of that declaration keeps its settings byte for byte (a resumed pipeline reruns none of
    them) and Table 8 gains the lossless rows after their model's MARS rows."""
    on = config(name)
    off = config(name, edit=lambda c: c["eval"].update(lossless_models=[]))
    before = X.all_settings(off)
    assert [s for s in X.all_settings(on) if s.method != "mars_lossless"] == before
    for s in before:
        args = (s.model, s.method, s.tau, s.metric, s.kind)
        assert J.as_param(J.eval_job(on, *args)) == J.as_param(J.eval_job(off, *args))
    assert J.as_param(J.bench_job(on)) == J.as_param(J.bench_job(off))
    for model in on["models"]:
        assert J.as_param(J.train_job(on, model)) == J.as_param(J.train_job(off, model))
    for table in X.TABLES:
        if table != "table8":
            assert J.as_param(J.table_job(on, table)) == J.as_param(J.table_job(off, table)), table
    rows = X.table_rows(on, "table8")
    assert [r for r in rows if r.setting.method == "mars"] == X.table_rows(off, "table8")
    methods = [(r.setting.model, r.setting.method) for r in rows]
    b4 = [i for i, (m, _) in enumerate(methods) if m == "mars_b4"]
    assert b4 == list(range(b4[0], b4[-1] + 1))  # one block: MARS rows, then the lossless ones
    assert [meth for _, meth in methods[b4[0] : b4[-1] + 1]] == ["mars"] * len(on["eval"]["sweep_taus"]) + [
        "mars_lossless"
    ] * sum(t < 1.0 for t in on["eval"]["sweep_taus"])
    lossless_row = next(r for r in rows if r.setting.method == "mars_lossless")
    assert lossless_row.keys == {"block_size": 4, "sft_loss": "yes"}


def test_a_lossless_model_outside_the_sweep_gets_its_rows_at_the_end():
    cfg = config("configs/smoke.yaml", edit=lambda c: c["eval"].update(lossless_models=["mars_b16"]))
    rows = X.table_rows(cfg, "table8")
    assert [(r.setting.model, r.setting.method, r.setting.tau) for r in rows][-1] == ("mars_b16", "mars_lossless", 0.5)
    assert rows[-1].keys == {"block_size": 16, "sft_loss": "yes"}
    assert {r.setting.model for r in rows if r.setting.method == "mars"} == {"mars_b4", "mars_nolar_b4"}
