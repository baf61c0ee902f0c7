"""mars.report.tables on hand-made pipeline outputs: every number checked against a value computed here by hand."""

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import yaml

from mars.pipeline import experiments as X
from mars.pipeline import jobs as J
from mars.pipeline.config import ConfigError, train_spec, validate
from mars.report.tables import make_table

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cfg():
    raw = yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text())
    raw.pop("seeds")  # one run per row (the seeded rows have a test of their own)
    return validate(raw)


def score(model: str, setting: str, family: str) -> float:
    """A made-up but distinct accuracy in [0, 1] for every (model, setting, family)."""
    return (sum(map(ord, model + setting + family)) % 97) / 100


def tpf(setting: str, family: str) -> float:
    return 1.0 if "tau1-" in setting else 1.5 + (sum(map(ord, family)) % 10) / 10


def item(model: str, setting: str, family: str, doc: int) -> float:
    """A made-up 0/1 score of one test item (doc) of an evaluation."""
    return float((sum(map(ord, model + setting + family)) // (doc + 1)) % 2)


def write_eval(path: Path, model: str, setting: str, family: str, block_size: int):
    path.parent.mkdir(parents=True, exist_ok=True)
    samples = [
        {"task": f"tiny_{family}", "doc_id": d, "metrics": {"exact_match": item(model, setting, family, d)}}
        for d in range(5)
    ]
    path.write_text(
        json.dumps(
            {
                "task": f"tiny_{family}",
                "family": family,
                "primary_metric": "exact_match",
                "samples": samples,
                "metrics": {"exact_match": {"value": score(model, setting, family), "stderr": 0.01}},
                "decoding": {"tokens_per_forward": tpf(setting, family), "generated_tokens": 30, "forwards": 20},
                "model_args": {"block_size": block_size, "cache": "cursor"},
                "eval_args": {"max_gen_toks": 24, "limit": 2},
            }
        )
    )


def outputs(cfg, tmp_path: Path, table: str, run_config_edit=None) -> tuple[dict, Path, list[str]]:
    results = tmp_path / "results"
    for model in cfg["models"]:
        folder = results / "models" / model
        folder.mkdir(parents=True, exist_ok=True)
        spec = train_spec(cfg, model).to_dict()
        if run_config_edit:
            run_config_edit(model, spec)
        (folder / "run_config.json").write_text(json.dumps({"spec": spec}))
        (folder / "metrics.json").write_text(json.dumps({"optimizer_steps": 10 + len(model), "train_runtime_s": 5.0}))
    files = []
    for setting in X.table_settings(cfg, table):
        for family, path in zip(setting.families, setting.files(results)):
            write_eval(
                Path(path),
                setting.model,
                setting.name,
                family,
                J.decoding_block_size(cfg, setting.model, setting.method),
            )
            files.append(path)
    return J.table_job(cfg, table), results, files


def test_table2_rows_scores_averages_and_the_settings_they_came_from(cfg, tmp_path):
    job, results, files = outputs(cfg, tmp_path, "table2")
    frame = make_table(job, results, tmp_path / "t" / "table2.csv", inputs=files)
    assert list(frame.row) == [
        "Base",
        "AR SFT (5 ep)",
        "AR SFT (10 ep)",
        "Block Diffusion (B=4)",
        "MARS w/o SFT loss (B=4)",
        "MARS (B=4)",
    ]
    mars = frame[frame.row == "MARS (B=4)"].iloc[0]
    expected = [100 * score("mars_b4", "mars-tau1-probability", f) for f in X.FAMILIES]
    assert [mars[f] for f in X.FAMILIES] == pytest.approx(expected)
    assert mars.avg == pytest.approx(sum(expected) / 6)
    assert mars.decode_method == "mars" and mars.decode_tau == 1.0 and mars.decode_block_size == 4
    assert mars.paper_avg == 30.4
    # MARS starts from AR SFT, which starts from the base: its cumulative steps add up the chain
    assert mars.cumulative_steps == (10 + len("mars_b4")) + (10 + len("ar_sft_5ep")) + (10 + len("base"))
    # every row records the recipe settings its model was trained with, where they apply (none for AR SFT's
    # dual-stream settings, nor for the plain-LM base)
    assert (mars.loss_turns, mars.loss_normalization, mars.pad_to_block, mars.mask_loss_weighting) == (
        "all",
        "token",
        "none",
        "uniform",
    )
    ar = frame[frame.row == "AR SFT (5 ep)"].iloc[0]
    assert ar.loss_turns == "all" and pd.isna(ar.loss_normalization) and pd.isna(ar.pad_to_block)
    written = pd.read_csv(tmp_path / "t" / "table2.csv")
    assert list(written.row) == list(frame.row)
    assert (tmp_path / "t" / "table2.md").read_text().startswith("Table 2")


def test_table4_change_is_fast_minus_exact_per_family(cfg, tmp_path):
    job, results, files = outputs(cfg, tmp_path, "table4")
    frame = make_table(job, results, tmp_path / "table4.csv", inputs=files)
    assert list(frame.block_size) == [4, 8, 16]
    row = frame[frame.block_size == 8].iloc[0]
    fast = "mars-tau0.95-probability"
    for family in X.FAMILIES:
        change = 100 * (score("mars_b8", fast, family) - score("mars_b8", "mars-tau1-probability", family))
        assert row[f"change_{family}"] == pytest.approx(change)
        assert row[f"tpf_{family}"] == pytest.approx(tpf(fast, family))
    assert row.avg_change_from_tau1 == pytest.approx(sum(row[f"change_{f}"] for f in X.FAMILIES) / 6)
    assert row.decode_block_size == 8  # the B=8 model decoded with its own window
    assert row.paper_avg_accuracy == 28.6  # the paper's 0.5B, B=8 row at its tau 0.95


def test_table4_puts_the_papers_numbers_only_beside_its_own_tau(cfg, tmp_path):
    cfg["eval"]["fast_tau"] = 0.9
    job, results, files = outputs(cfg, tmp_path, "table4")
    frame = make_table(job, results, tmp_path / "table4.csv", inputs=files)
    assert (frame.tau == 0.9).all() and frame.paper_avg_accuracy.isna().all()


def test_result_files_are_readable_by_others(tmp_path):
    import os

    from mars.fileio import write_text_atomic

    old = os.umask(0o022)
    try:
        write_text_atomic(tmp_path / "a.csv", "x\n")
    finally:
        os.umask(old)
    assert (tmp_path / "a.csv").stat().st_mode & 0o777 == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["a.csv"]  # no temporary file left


def test_ablations_delta_against_the_reference(cfg, tmp_path):
    job, results, files = outputs(cfg, tmp_path, "ablations")
    frame = make_table(job, results, tmp_path / "ablations.csv", inputs=files)
    row = frame[frame.model == "mars_nolar_b16"].iloc[0]
    a = sum(100 * score("mars_nolar_b16", "mars-tau1-probability", f) for f in X.FAMILIES) / 6
    b = sum(100 * score("mars_b16", "mars-tau1-probability", f) for f in X.FAMILIES) / 6
    assert (row.reference, row.avg, row.reference_avg, row.delta) == (
        "mars_b16",
        pytest.approx(a),
        pytest.approx(b),
        pytest.approx(a - b),
    )
    assert row.avg_tpf_fast_tau == pytest.approx(sum(tpf("x", f) for f in X.FAMILIES) / 6)
    ar = frame[frame.ablation == "10-epoch AR"].iloc[0]
    assert math.isnan(ar.avg_tpf_fast_tau)
    # the first seeds' difference paired by test item: per family the variance of the five items' differences / 5
    one = "mars-tau1-probability"
    diffs = {f: [item("mars_nolar_b16", one, f, d) - item("mars_b16", one, f, d) for d in range(5)] for f in X.FAMILIES}
    var = sum(sum((x - sum(v) / 5) ** 2 for x in v) / 4 / 5 for v in diffs.values())
    assert row.delta_first_seed == pytest.approx(a - b)
    assert row.delta_first_seed_se_items == pytest.approx(100 * math.sqrt(var) / 6)
    # compute-matched cost: the whole init chain, whichever table the row is in
    assert row.cumulative_steps == steps("mars_nolar_b16") + steps("ar_sft_5ep") + steps("base")
    assert ar.cumulative_steps == steps("ar_sft_10ep") + steps("base")


def steps(model: str) -> int:
    return 10 + len(model)  # what outputs() writes into metrics.json


def test_table3_cumulative_cost_follows_the_init_chain(cfg, tmp_path):
    job, results, files = outputs(cfg, tmp_path, "table3")
    frame = make_table(job, results, tmp_path / "table3.csv", inputs=files).set_index("model")
    for model in ("mars_b4", "mars_nolar_b16"):
        assert frame.loc[model, "optimizer_steps"] == steps(model)
        assert frame.loc[model, "cumulative_steps"] == steps(model) + steps("ar_sft_5ep") + steps("base")


def test_table8_marks_block_size_and_sft_loss_from_the_run_configs(cfg, tmp_path):
    job, results, files = outputs(cfg, tmp_path, "table8")
    frame = make_table(job, results, tmp_path / "table8.csv", inputs=files)
    assert set(zip(frame.model, frame.block_size, frame.sft_loss, frame.tau)) == {
        (m, 4, sft, t) for m, sft in (("mars_b4", "yes"), ("mars_nolar_b4", "no")) for t in (1.0, 0.5)
    }
    ours = frame[(frame.model == "mars_b4") & (frame.tau == 0.5)].iloc[0]
    assert ours.paper_7b_b4_gsm8k == 56.0  # the paper's B=4 point at tau 0.5, beside the B=4 model with L_AR
    assert math.isnan(frame[(frame.model == "mars_nolar_b4") & (frame.tau == 0.5)].iloc[0].paper_7b_b4_gsm8k)


def test_a_missing_evaluation_is_an_error_not_a_missing_row(cfg, tmp_path):
    job, results, files = outputs(cfg, tmp_path, "table2")
    dropped = [f for f in files if "/mars_nolar_b4/" not in f]
    with pytest.raises(ConfigError, match="no eval result for mars_nolar_b4 mars-tau1-probability"):
        make_table(job, results, tmp_path / "table2.csv", inputs=dropped)
    assert not (tmp_path / "table2.csv").exists()


def test_a_checkpoint_trained_otherwise_than_the_config_says_is_stale(cfg, tmp_path):
    def edit(model, spec):
        if model == "mars_b8":
            spec["block_size"] = 4

    job, results, files = outputs(cfg, tmp_path, "table3", run_config_edit=edit)
    with pytest.raises(ConfigError, match="checkpoint mars_b8 was trained with block_size=4"):
        make_table(job, results, tmp_path / "table3.csv", inputs=files)


def test_a_checkpoint_trained_with_another_recipe_is_stale(cfg, tmp_path):
    def edit(model, spec):
        if model == "mars_b4":
            spec["loss_normalization"] = "sequence"

    job, results, files = outputs(cfg, tmp_path, "table2", run_config_edit=edit)
    with pytest.raises(ConfigError, match="checkpoint mars_b4 was trained with loss_normalization='sequence'"):
        make_table(job, results, tmp_path / "table2.csv", inputs=files)


def test_cost_table_from_snakemake_benchmarks(cfg, tmp_path):
    job, results, _ = outputs(cfg, tmp_path, "cost")
    bench = []
    for i, model in enumerate(cfg["models"]):
        path = tmp_path / "bench" / f"{model}.tsv"
        path.parent.mkdir(exist_ok=True)
        path.write_text(f"s\th:m:s\tmax_rss\tmax_vms\n{10.0 * (i + 1)}\t0:00:10\t{100.0 + i}\t200\n")
        bench.append(str(path))
    frame = make_table(job, results, tmp_path / "cost.csv", inputs=bench).set_index("model")
    order = list(cfg["models"])
    wall = {m: 10.0 * (order.index(m) + 1) for m in order}
    per_step = {m: wall[m] / (10 + len(m)) for m in order}
    assert frame.loc["mars_b8", "s_per_step"] == pytest.approx(per_step["mars_b8"])
    assert frame.loc["mars_b8", "s_per_step_vs_init"] == pytest.approx(per_step["mars_b8"] / per_step["ar_sft_5ep"])
    assert frame.loc["mars_b8", "peak_rss_vs_init"] == pytest.approx(
        (100.0 + order.index("mars_b8")) / (100.0 + order.index("ar_sft_5ep"))
    )
    assert math.isnan(frame.loc["ar_sft_5ep", "s_per_step_vs_init"])
    # a resumed job: Snakemake timed its last invocation only, so the earlier ones (as mars train recorded them in
    # metrics.json) are added; the last invocation's time is not divided by all the steps
    metrics_file = results / "models" / "mars_b8" / "metrics.json"
    metrics_file.write_text(json.dumps({**json.loads(metrics_file.read_text()), "wall_time_s_before_resume": 7.5}))
    frame = make_table(job, results, tmp_path / "cost.csv", inputs=bench).set_index("model")
    assert frame.loc["mars_b8", "job_wall_time_s"] == pytest.approx(wall["mars_b8"] + 7.5)
    assert frame.loc["mars_b8", "wall_time_s_before_resume"] == 7.5
    assert frame.loc["mars_b8", "s_per_step"] == pytest.approx((wall["mars_b8"] + 7.5) / (10 + len("mars_b8")))
    assert frame.loc["mars_b4", "s_per_step"] == pytest.approx(per_step["mars_b4"])  # (never resumed: as before)


def test_seeded_rows_show_mean_deviation_and_paired_standard_error(cfg, tmp_path):
    cfg["seeds"] = {"extra": [1, 2], "models": ["ar_sft_5ep", "mars_b4", "mars_nolar_b4"]}
    cfg = validate(cfg)
    job, results, files = outputs(cfg, tmp_path, "table2")
    frame = make_table(job, results, tmp_path / "t" / "table2.csv", inputs=files).set_index("model")
    setting = "mars-tau1-probability"

    def avg(model, name):
        return 100 * sum(score(model, name, f) for f in X.FAMILIES) / 6

    runs = [avg(m, setting) for m in ("mars_b4", "mars_b4_seed1", "mars_b4_seed2")]
    mean = sum(runs) / 3
    assert frame.loc["mars_b4", "avg"] == pytest.approx(mean)
    assert frame.loc["mars_b4", "avg_std"] == pytest.approx(math.sqrt(sum((r - mean) ** 2 for r in runs) / 2))
    assert frame.loc["mars_b4", "gsm8k"] == pytest.approx(
        100 * sum(score(m, setting, "gsm8k") for m in ("mars_b4", "mars_b4_seed1", "mars_b4_seed2")) / 3
    )
    assert frame.loc["mars_b4", "n_seeds"] == 3
    assert frame.loc["mars_b4", "avg_seeds"] == ";".join(f"{r:.2f}" for r in runs)
    assert frame.loc["base", "n_seeds"] == 1 and math.isnan(frame.loc["base", "avg_std"])
    # the ablations: no L_AR minus MARS, paired by seed (seed s of both starts from AR SFT seed s)
    job, results, files = outputs(cfg, tmp_path / "ab", "ablations")
    ablations = make_table(job, results, tmp_path / "t" / "ablations.csv", inputs=files)
    row = ablations[ablations.model == "mars_nolar_b4"].iloc[0]
    diffs = [
        avg(a, setting) - avg(b, setting)
        for a, b in (
            ("mars_nolar_b4", "mars_b4"),
            ("mars_nolar_b4_seed1", "mars_b4_seed1"),
            ("mars_nolar_b4_seed2", "mars_b4_seed2"),
        )
    ]
    d = sum(diffs) / 3
    assert row.delta == pytest.approx(d)
    assert row.delta_se == pytest.approx(math.sqrt(sum((x - d) ** 2 for x in diffs) / 2) / math.sqrt(3))
    assert row.delta_first_seed == pytest.approx(diffs[0]) and diffs[0] != pytest.approx(d)  # seed 0 alone
    # the 95 % interval uses Student's t with 2 degrees of freedom (4.303, from a t table), not 2 x SE
    assert row.delta_ci95 == pytest.approx(4.302653 * row.delta_se, rel=1e-6)
    assert row.verdict == ("within noise" if abs(d) <= row.delta_ci95 else "lower" if d < 0 else "higher")
    # a row with one seed is compared with its reference's run of the same seed (seed 0), and has no error
    bidir = ablations[ablations.model == "mars_bidir_b4"].iloc[0]
    assert bidir.delta == pytest.approx(avg("mars_bidir_b4", setting) - avg("mars_b4", setting))
    assert bidir.reference_avg == pytest.approx(avg("mars_b4", setting))
    assert math.isnan(bidir.delta_se) and bidir.n_seeds == 1 and bidir.verdict == "one seed"


def test_item_scores_of_a_filtered_metric_come_from_that_filters_samples(tmp_path):
    """The paper tasks' primary metrics carry a filter (``exact_match,flexible-extract``): the harness records one
    sample per document and filter, the metric under its bare name."""
    from mars.report.collect import load_eval

    samples = [
        {"task": "gsm8k_cot", "doc_id": d, "filter": f, "metrics": {"exact_match": float(v)}}
        for d, (strict, flexible) in enumerate([(0, 1), (0, 0), (1, 1)])
        for f, v in (("strict-match", strict), ("flexible-extract", flexible))
    ]
    record = {
        "task": "gsm8k_cot",
        "family": "gsm8k",
        "primary_metric": "exact_match,flexible-extract",
        "metrics": {"exact_match,flexible-extract": {"value": 2 / 3, "stderr": 0.3}},
        "decoding": {"tokens_per_forward": 1.0, "generated_tokens": 3, "forwards": 3},
        "samples": samples,
    }
    (tmp_path / "gsm8k.json").write_text(json.dumps(record))
    assert load_eval(tmp_path / "gsm8k.json")["items"] == {"gsm8k_cot/0": 1.0, "gsm8k_cot/1": 0.0, "gsm8k_cot/2": 1.0}


def test_written_tables_keep_five_decimals_of_a_loss_and_two_of_the_rest(tmp_path):
    from mars.report.tables import write_table

    write_table(
        pd.DataFrame({"avg": [55.123456], "ar_train_loss": [0.0023712], "t_one_ms": [1.234567]}), tmp_path / "t.csv"
    )
    assert (tmp_path / "t.csv").read_text().splitlines()[1] == "55.12,0.00237,1.23457"


def test_real_model_table_humaneval_and_text_loss_by_hand(tmp_path):
    """The real-model table (configs/smollm2-135m.yaml): its rows, the harness's HumanEval numbers as recorded, and
    the text losses with their paired differences computed here."""
    cfg = validate(yaml.safe_load((ROOT / "configs" / "smollm2-135m.yaml").read_text()))
    job, results, files = outputs(cfg, tmp_path, X.REAL_TABLE)
    assert [Path(f).relative_to(results).parts[0] for f in files] == ["real"] * 6
    # two files of real text; each model's per-file losses 2 + k/10 and 3 + k/5 nats over 10 and 30 tokens
    models = X.text_loss_models(cfg)
    assert models == ["world", "ar_sft", "ar_sft_cont", "mars_nolar_b4", "mars_b4"]
    losses = {}
    for k, model in enumerate(models):
        per_file = [
            {"file": "a.py", "sha256": "1", "tokens": 10, "loss_sum": 10 * (2 + k / 10)},
            {"file": "b.py", "sha256": "2", "tokens": 30, "loss_sum": 30 * (3 + k / 5)},
        ]
        losses[model] = (10 * (2 + k / 10) + 30 * (3 + k / 5)) / 40
        record = {"loss": losses[model], "tokens": 40, "files": 2, "max_tokens": 512, "per_file": per_file}
        (tmp_path / "tl").mkdir(exist_ok=True)
        (tmp_path / "tl" / f"{model}.json").write_text(json.dumps(record))
    frame = make_table(
        job,
        results,
        tmp_path / "t" / "real_model.csv",
        inputs=files,
        text_losses=[tmp_path / "tl" / f"{m}.json" for m in models],
    )
    assert list(frame.row) == [
        "Base (tau=1)",
        "AR SFT (tau=1)",
        "AR continuation (tau=1)",
        "MARS w/o SFT loss (tau=1)",
        "MARS (tau=1)",
        "MARS (tau=0.95)",
    ]
    mars_fast = frame.iloc[5]
    assert mars_fast.model == "mars_b4" and mars_fast.tau == 0.95
    assert mars_fast.humaneval == pytest.approx(100 * score("mars_b4", "mars-tau0.95-probability", "humaneval"))
    assert mars_fast.humaneval_se == pytest.approx(1.0)
    assert mars_fast.tpf_humaneval == pytest.approx(tpf("mars-tau0.95-probability", "humaneval"))
    # mars_b4 is k=4: per-file differences from Base 0.4 and 0.8 (weights 1/4, 3/4): 0.7; from AR SFT (k=1) 0.525
    assert mars_fast.text_loss == pytest.approx(losses["mars_b4"])
    assert mars_fast.text_loss_vs_base == pytest.approx(0.7)
    assert mars_fast.text_loss_vs_ar_sft == pytest.approx(0.75 * 0.6 + 0.25 * 0.3)
    # SE over files of the weighted mean: sqrt(2 * sum w^2 (d - mean)^2)
    assert mars_fast.text_loss_vs_base_se == pytest.approx(math.sqrt(2 * (0.0625 * 0.09 + 0.5625 * 0.01)))
    assert math.isnan(frame.iloc[0].text_loss_vs_base) and math.isnan(frame.iloc[1].text_loss_vs_ar_sft)
    with pytest.raises(ConfigError, match="no text-loss record of mars_b4"):
        make_table(
            job,
            results,
            tmp_path / "t2" / "real_model.csv",
            inputs=files,
            text_losses=[tmp_path / "tl" / f"{m}.json" for m in models[:4]],
        )


def test_table2_shows_each_models_own_epochs_beside_the_papers_row_labels(cfg, tmp_path):
    smollm2 = validate(yaml.safe_load((ROOT / "configs" / "smollm2-135m.yaml").read_text()))
    job, results, files = outputs(smollm2, tmp_path, "table2")
    frame = make_table(job, results, tmp_path / "t" / "table2.csv", inputs=files)
    ar = frame[frame.row == "AR SFT (5 ep)"].iloc[0]
    assert ar.model == "ar_sft" and ar.epochs == 2 and ar.paper_avg == 28.7  # the paper's row, this run's epochs
    assert math.isnan(frame[frame.row == "Base"].iloc[0].epochs)
    # a run cut by max_steps (the smoke config) has no epoch count to show
    job, results, files = outputs(cfg, tmp_path / "smoke", "table2")
    assert make_table(job, results, tmp_path / "s" / "table2.csv", inputs=files).epochs.isna().all()


def test_curve_table_budgets_changes_and_tokens_per_forward_by_hand(tmp_path):
    """The learning-curve table (configs/smollm2-curve.yaml over configs/smollm2-135m.yaml): one row per model, its
    example passes from metrics.json, its tau-1.0 change from the start, its fast-tau accuracy and tokens per
    forward, the lossless GSM8K-like numbers, and the comparison with the AR continuation at the same steps only."""

    def merge(a: dict, b: dict) -> dict:
        return {
            **a,
            **{k: merge(a[k], v) if isinstance(v, dict) and isinstance(a.get(k), dict) else v for k, v in b.items()},
        }

    raw = merge(
        *(yaml.safe_load((ROOT / "configs" / n).read_text()) for n in ("smollm2-135m.yaml", "smollm2-curve.yaml"))
    )
    cfg = validate(raw)
    job, results, files = outputs(cfg, tmp_path, X.CURVE_TABLE)
    steps = {
        "ar_sft": 200,
        "mars_x1": 200,
        "mars_x2": 400,
        "mars_x4": 800,
        "mars_x8": 1600,
        "ar_cont_x2": 400,
        "mars_self_x2": 400,
    }
    for model, n in steps.items():
        metrics = {"optimizer_steps": n, "effective_batch": 16, "final_loss_mask": n / 1000, "final_heldout_loss": 0.3}
        (results / "models" / model / "metrics.json").write_text(json.dumps(metrics))
    frame = make_table(job, results, tmp_path / "t" / "curve.csv", inputs=files)
    assert list(frame.model) == ["ar_sft", "ar_cont_x2", "mars_x1", "mars_x2", "mars_x4", "mars_x8", "mars_self_x2"]
    assert list(frame.role) == ["start", "ar_continuation", *["mars"] * 4, "self_distilled"]
    assert list(frame.example_passes) == [3200, 6400, 3200, 6400, 12800, 25600, 6400]
    row = frame.set_index("model").loc["mars_x2"]
    families = X.FAMILIES

    def avg(model, setting):
        return sum(100 * score(model, setting, f) for f in families) / len(families)

    assert row.avg_tau1 == pytest.approx(avg("mars_x2", "mars-tau1-probability"))
    assert row.change_vs_start == pytest.approx(row.avg_tau1 - avg("ar_sft", "ar-tau1-probability"))
    assert row.change_vs_ar_continuation == pytest.approx(row.avg_tau1 - avg("ar_cont_x2", "ar-tau1-probability"))
    assert row.avg_fast == pytest.approx(avg("mars_x2", "mars-tau0.95-probability"))
    assert row.tpf_fast == pytest.approx(sum(tpf("mars-tau0.95-probability", f) for f in families) / len(families))
    assert row.lossless_tpf_gsm8k == pytest.approx(tpf("mars_lossless-tau0.95-probability", "gsm8k"))
    assert row.lossless_gsm8k == pytest.approx(100 * score("mars_x2", "mars_lossless-tau0.95-probability", "gsm8k"))
    assert row.final_loss_mask == pytest.approx(0.4) and row.paper_tpf_fast == pytest.approx(1.46)
    # the continuation is compared where the steps match (x2) only
    assert math.isnan(frame.set_index("model").loc["mars_x4"].change_vs_ar_continuation)
    assert row.change_vs_start_se > 0
    from mars.report.fig_curve import main as fig_curve

    paths = fig_curve(str(tmp_path / "t" / "curve.csv"), str(tmp_path / "f" / "fig_curve"))
    assert [p.suffix for p in paths] == [".png", ".pdf"] and all(p.stat().st_size > 1000 for p in paths)
