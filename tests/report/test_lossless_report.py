"""Lossless self-speculative MARS in the report, on hand-made pipeline outputs: its Table 8 rows, its Table 5 row
and its Figure 3 points."""

import math

import pandas as pd
import pytest
import yaml

from mars.pipeline import experiments as X
from mars.pipeline import jobs as J
from mars.pipeline.config import ConfigError, validate
from mars.report import fig3
from mars.report.tables import make_table
from tests.report.test_tables import ROOT, outputs, score, tpf


@pytest.fixture
def cfg():
    return validate(yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text()))


def test_table8_lossless_rows_beside_the_mars_rows(cfg, tmp_path):
    job, results, files = outputs(cfg, tmp_path, "table8")
    frame = make_table(job, results, tmp_path / "table8.csv", inputs=files)
    # the smoke config: sweep taus 1.0 and 0.5; the lossless model (null: the bench model) is mars_b4
    assert list(zip(frame.model, frame.decoding, frame.tau)) == [
        ("mars_b4", "mars", 1.0),
        ("mars_b4", "mars", 0.5),
        ("mars_b4", "mars_lossless", 0.5),
        ("mars_nolar_b4", "mars", 1.0),
        ("mars_nolar_b4", "mars", 0.5),
    ]
    row = frame[frame.decoding == "mars_lossless"].iloc[0]
    for family in X.SWEEP_FAMILIES:
        assert row[family] == pytest.approx(100 * score("mars_b4", "mars_lossless-tau0.5-probability", family))
        assert row[f"tpf_{family}"] == pytest.approx(tpf("mars_lossless-tau0.5-probability", family))
    assert (row.block_size, row.sft_loss) == (4, "yes")
    assert (row.decode_method, row.decode_tau, row.decode_block_size) == ("mars_lossless", 0.5, 4)
    # the paper has no lossless decoding: its B=4 numbers only beside the MARS row at the same tau
    assert math.isnan(row.paper_7b_b4_gsm8k) and math.isnan(row.paper_7b_b4_tpf_gsm8k)
    mars = frame[(frame.decoding == "mars") & (frame.model == "mars_b4") & (frame.tau == 0.5)].iloc[0]
    assert mars.paper_7b_b4_gsm8k == 56.0
    written = pd.read_csv(tmp_path / "table8.csv")
    assert list(written.decoding) == list(frame.decoding)
    assert "mars_lossless" in (tmp_path / "table8.md").read_text()


def test_a_missing_lossless_evaluation_is_an_error(cfg, tmp_path):
    job, results, files = outputs(cfg, tmp_path, "table8")
    with pytest.raises(ConfigError, match="no sweep result for mars_b4 mars_lossless-tau0.5-probability"):
        make_table(job, results, tmp_path / "table8.csv", inputs=[f for f in files if "mars_lossless" not in f])


def bench_csv(path, settings) -> None:
    rows = []
    for b in (4, 8):
        for i, s in enumerate(settings):
            rows.append(
                {
                    "batch_size": b,
                    "setting": s,
                    "tokens": 100,
                    "time_s": 1.0 + i,
                    "tokens_per_s": 100 / (1.0 + i),
                    "speedup_vs_ar_kv": 1 / (1.0 + i),
                    "time_vs_ar_kv": 1.0 + i,
                    "tokens_per_forward": 1.7 if s.startswith("mars") else None,
                }
            )
    pd.DataFrame(rows).to_csv(path, index=False)


def test_table5_shows_the_lossless_row_without_a_paper_number(cfg, tmp_path):
    settings = [
        "ar_hf_kv",
        "mars_tau1",
        "mars_none",
        "mars_block_32",
        "mars_cursor",
        "mars_lossless",
        "prompt_lookup",
        "mars_authors_block_32",
    ]
    bench_csv(tmp_path / "bench.csv", settings)
    frame = make_table(J.table_job(cfg, "table5"), None, tmp_path / "table5.csv", bench_csv=tmp_path / "bench.csv")
    assert list(frame.setting) == settings * 2
    lossless = frame[frame.setting == "mars_lossless"]
    assert list(lossless.batch_size) == [4, 8]
    assert list(lossless.speedup_vs_ar_kv) == pytest.approx([1 / 6, 1 / 6])
    assert lossless.paper_speedup_vs_ar_kv.isna().all()
    # beside it, the paper's numbers where it has them (its 7B at batch 4 and 8)
    assert frame[frame.setting == "mars_none"].paper_speedup_vs_ar_kv.tolist() == [0.90, 0.49]
    # the paper's block-cache numbers are the authors' block cache's: beside that row, not this project's block cache
    assert frame[frame.setting == "mars_authors_block_32"].paper_speedup_vs_ar_kv.tolist() == [1.71, 1.60]
    assert frame[frame.setting == "mars_block_32"].paper_speedup_vs_ar_kv.isna().all()


def test_figure3_draws_the_lossless_points_apart_from_the_mars_curves(cfg, tmp_path, monkeypatch):
    job, results, files = outputs(cfg, tmp_path, "table8")
    table8 = make_table(job, results, tmp_path / "table8.csv", inputs=files)
    pd.DataFrame([{"row": "AR SFT (5 ep)", "gsm8k": 10.0, "humaneval": 20.0}]).to_csv(tmp_path / "t2.csv", index=False)
    drawn = {}
    monkeypatch.setattr(fig3, "save", lambda fig, stem: drawn.setdefault("fig", fig))
    fig3.main(str(tmp_path / "table8.csv"), str(tmp_path / "t2.csv"), str(tmp_path / "fig3"))
    for ax, family in zip(drawn["fig"].axes, X.SWEEP_FAMILIES):
        lines = {line.get_label(): line for line in ax.get_lines()}
        assert set(lines) >= {"B=4", "B=4 w/o L_AR", "B=4 lossless", "AR SFT (5 ep)"}
        ours = table8[table8.decoding == "mars_lossless"]
        star = lines["B=4 lossless"]
        assert star.get_marker() == "*" and star.get_linestyle() == "None"
        assert list(star.get_xdata()) == pytest.approx(list(ours[f"tpf_{family}"]))
        assert list(star.get_ydata()) == pytest.approx(list(ours[family]))
        assert star.get_color() == lines["B=4"].get_color()  # the colour of its model's curve
        # the MARS curve of the same model holds only its MARS points (tau 1.0, then 0.5)
        mars = table8[(table8.decoding == "mars") & (table8.model == "mars_b4")]
        assert list(lines["B=4"].get_xdata()) == pytest.approx(list(mars[f"tpf_{family}"]))
