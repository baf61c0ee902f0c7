"""The scaling study's table and figures on hand-made pipeline outputs, each number computed here by hand."""

import json
import math
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import save_file

from mars.pipeline import experiments as X
from mars.pipeline import jobs as J
from mars.pipeline.config import validate
from mars.report.fig_scaling import heldout, scaling
from mars.report.scaling import parameter_count
from mars.report.tables import make_table
from tests.report.test_tables import score, tpf, write_eval

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cfg():
    raw = yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text())
    raw["world"]["sft_scales"] = [2]
    raw["seeds"] = {"extra": [1, 2], "models": ["ar_sft_5ep", "mars_b4"]}
    raw["study"] = {
        "sizes": {
            "h16": {"hidden_size": 16, "intermediate_size": 32, "num_attention_heads": 1, "num_key_value_heads": 1}
        },
        "sft_scales": [2],
        "taus": [1.0, 0.5],
    }
    return validate(raw)


def fake_outputs(cfg, tmp_path):
    results = tmp_path / "results"
    for model in X.study_models(cfg):
        folder = results / "models" / model
        folder.mkdir(parents=True)
        hidden = 16 if model.startswith("study_h16") else 32
        save_file({"w": torch.zeros(hidden, 3), "b": torch.zeros(5)}, str(folder / "model.safetensors"))
        (folder / "config.json").write_text(json.dumps({"hidden_size": hidden}))
        loss = 1.0 + len(model) / 100  # distinct per model
        (folder / "metrics.json").write_text(
            json.dumps(
                {
                    "num_examples": 100 * (2 if "x2" in model else 1),
                    "final_heldout_loss": loss,
                    "final_train_slice_loss": loss / 2,
                    "train_runtime_s": 10.0 + len(model),
                }
            )
        )
        history = [{"step": s, "eval_heldout_loss": loss + 1 / s} for s in (2, 4)]
        (folder / "run_config.json").write_text(json.dumps({"log_history": history}))
    files = []
    for setting in X.study_settings(cfg):
        for family, path in zip(setting.families, setting.files(results)):
            write_eval(Path(path), setting.model, setting.name, family, 4)
            files.append(path)
    return results, files


def avg(model, setting):
    return 100 * sum(score(model, setting, f) for f in X.FAMILIES) / 6


def test_scaling_table_numbers(cfg, tmp_path):
    results, files = fake_outputs(cfg, tmp_path)
    frame = make_table(J.study_job(cfg), results, tmp_path / "t" / "scaling.csv", inputs=files).set_index("point")
    assert list(frame.index) == ["default", "h16", "x2"]
    assert list(frame.axis) == ["default", "model size", "SFT set size"]
    one, fast = "mars-tau1-probability", "mars-tau0.5-probability"
    ar = "ar-tau1-probability"
    # default point: AR SFT and MARS have 3 seeds: means, and the paired standard error of MARS minus AR
    diffs = [
        avg(m, one) - avg(a, ar)
        for m, a in (
            ("mars_b4", "ar_sft_5ep"),
            ("mars_b4_seed1", "ar_sft_5ep_seed1"),
            ("mars_b4_seed2", "ar_sft_5ep_seed2"),
        )
    ]
    d = sum(diffs) / 3
    row = frame.loc["default"]
    assert row.n_seeds == 3
    assert row.mars_minus_ar == pytest.approx(d)
    assert row.mars_minus_ar_se_seeds == pytest.approx(math.sqrt(sum((x - d) ** 2 for x in diffs) / 2 / 3))
    # the test-item standard error: each model's six 1-point stderrs -> sqrt(6) / 6 per model, two models
    assert row.mars_minus_ar_se_test == pytest.approx(math.sqrt(2 * (math.sqrt(6) / 6) ** 2))
    assert row.mars_minus_ar_ci95_seeds == pytest.approx(4.302653 * row.mars_minus_ar_se_seeds, rel=1e-6)
    # no L_AR has one seed: its difference is to AR SFT's seed-0 run (where it starts), without a seed error
    assert row.nolar_minus_ar == pytest.approx(avg("mars_nolar_b4", one) - avg("ar_sft_5ep", ar))
    assert math.isnan(row.nolar_minus_ar_se_seeds) and math.isnan(row.nolar_minus_ar_ci95_seeds)
    assert row.cont_model == "study_default_cont"
    # a size point: its own chain; tokens per forward and change at tau 0.5 of its MARS model
    row = frame.loc["h16"]
    assert row.mars_minus_ar == pytest.approx(avg("study_h16_mars", one) - avg("study_h16_ar", ar))
    assert row.cont_minus_ar == pytest.approx(avg("study_h16_cont", ar) - avg("study_h16_ar", ar))
    assert row["mars_tpf_tau0.5"] == pytest.approx(sum(tpf(fast, f) for f in X.FAMILIES) / 6)
    assert row["mars_change_tau0.5"] == pytest.approx(avg("study_h16_mars", fast) - avg("study_h16_mars", one))
    assert row.parameters == 16 * 3 + 5 and row.hidden_size == 16
    assert row.ar_heldout_loss == pytest.approx(1 + len("study_h16_ar") / 100)
    assert row.ar_train_loss == pytest.approx((1 + len("study_h16_ar") / 100) / 2)
    # its training time: its own base, AR SFT, both MARS models and the continuation
    own = ["study_h16_base", "study_h16_ar", "study_h16_mars", "study_h16_nolar", "study_h16_cont"]
    assert row.train_wall_time_s == pytest.approx(sum(10.0 + len(m) for m in own))
    # a data point: the default base (not its time), the larger set's record count
    assert frame.loc["x2"].sft_records == 200 and frame.loc["x2"].base_model == "base"
    x2 = [m.replace("h16", "x2") for m in own[1:]]
    assert frame.loc["x2"].train_wall_time_s == pytest.approx(sum(10.0 + len(m) for m in x2))
    # the figures come out of the table (and the training logs)
    assert all(p.is_file() for p in scaling(str(tmp_path / "t" / "scaling.csv"), str(tmp_path / "f" / "s")))
    assert all(
        p.is_file() for p in heldout(str(tmp_path / "t" / "scaling.csv"), str(results), str(tmp_path / "f" / "h"))
    )


def test_parameter_count_counts_every_tensor_once(tmp_path):
    save_file({"a": torch.zeros(3, 4), "b": torch.zeros(7)}, str(tmp_path / "model.safetensors"))
    assert parameter_count(tmp_path) == 19
