"""End to end: the smoke config runs every rule of the workflow and produces every table and figure.

A whole workflow run (about 10 minutes on 2 cores): marked ``pipeline``, left out of the test command and run by CI
(``.ci/run``) beside the paper configs' rehearsals: ``pytest -m pipeline``.
"""

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "configs" / "smoke.yaml"
TABLES = ["table2", "table3", "table4", "table5", "table8", "table9", "ablations", "cost"]
FIGURES = ["fig1_shaded_generation", "fig3_pareto", "fig6_acceptance_metrics", "fig_wallclock"]
ALL_RULES = {
    "world",
    "train",
    "evaluate",
    "evaluate_sweep",
    "bench",
    "table",
    "table5",
    "cost_table",
    "figure1",
    "figure3",
    "figure6",
    "figure_wallclock",
}

pytestmark = pytest.mark.pipeline


def snakemake(workdir: Path, *args, timeout=1500, config=CONFIG) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "--snakefile",
            str(ROOT / "Snakefile"),
            "--directory",
            str(workdir),
            *args,
            "--configfile",
            str(config),
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def planned(workdir: Path, *args, config=CONFIG) -> dict:
    import re

    proc = snakemake(workdir, "-n", *args, "--quiet", "rules", config=config)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    jobs = {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", proc.stdout + proc.stderr, re.M)}
    jobs.pop("total", None)
    return jobs


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("smoke")
    proc = snakemake(workdir, "--cores", "2")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return workdir, proc.stdout + proc.stderr


def test_every_rule_ran(smoke_run):
    workdir, log = smoke_run
    for rule in ALL_RULES:
        assert f"rule {rule}:" in log or f"localrule {rule}:" in log, rule
    # MLflow's store and artifacts stay in the results folder, not in the working directory
    assert not (workdir / "mlruns").exists()
    artifacts = workdir / "results" / "mlartifacts" / "smoke"
    assert any(p.name == "run_config.json" for p in artifacts.rglob("*"))


def test_every_table_has_its_rows_columns_and_paper_numbers(smoke_run):
    workdir, _ = smoke_run
    tables = workdir / "results" / "smoke" / "tables"
    frames = {}
    for name in TABLES:
        for suffix in (".csv", ".md", ".tex"):
            assert (tables / f"{name}{suffix}").is_file(), name + suffix
        frames[name] = pd.read_csv(tables / f"{name}.csv")
        assert not frames[name].empty, name
    families = ["ifeval", "bbh", "mmlu_pro", "gpqa", "gsm8k", "humaneval"]
    t2 = frames["table2"]
    assert list(t2["row"]) == [
        "Base",
        "AR SFT (5 ep)",
        "AR SFT (10 ep)",
        "Block Diffusion (B=4)",
        "MARS w/o SFT loss (B=4)",
        "MARS (B=4)",
    ]
    for column in [*families, "avg", "optimizer_steps", "cumulative_steps"]:
        assert t2[column].map(math.isfinite).all(), column
        assert (t2[column] >= 0).all()
    assert (t2[families] <= 100).all().all()
    assert t2["paper_avg"].tolist() == [17.2, 28.7, 26.4, 22.8, 28.4, 30.4]
    # MARS continues from AR SFT: its cumulative cost includes the AR SFT steps
    mars = t2[t2.row == "MARS (B=4)"].iloc[0]
    assert mars.cumulative_steps > mars.optimizer_steps
    t3 = frames["table3"]
    assert sorted(zip(t3.sft_loss, t3.block_size)) == sorted((s, b) for s in ("no", "yes") for b in (4, 8, 16))
    assert "paper_avg" in t3
    t4 = frames["table4"]
    assert list(t4.block_size) == [4, 8, 16] and (t4.avg_tokens_per_forward >= 1).all()
    assert "paper_avg_tokens_per_forward" in t4
    t5 = frames["table5"]
    assert {"ar_hf_kv", "mars_none", "mars_cursor", "prompt_lookup", "mars_tau1", "mars_lossless"} <= set(t5.setting)
    # lossless MARS generates exactly the greedy tokens (the same count as MARS in one-token mode)
    assert t5[t5.setting == "mars_lossless"].tokens.tolist() == t5[t5.setting == "mars_tau1"].tokens.tolist()
    assert "paper_speedup_vs_ar_kv" in t5 and t5.tokens_per_s.map(math.isfinite).all()
    t8 = frames["table8"]
    assert set(t8.model) == {"mars_b4", "mars_nolar_b4"} and set(t8.tau) == {1.0, 0.5}
    assert (t8[t8.tau == 1.0].tpf_gsm8k == 1.0).all()  # one-token mode: exactly one token per forward
    # lossless MARS (the bench model, at the taus below 1.0) decodes exactly greedily: the tau-1.0 accuracy
    lossless = t8[t8.decoding == "mars_lossless"]
    assert list(zip(lossless.model, lossless.tau)) == [("mars_b4", 0.5)]
    greedy = t8[(t8.decoding == "mars") & (t8.model == "mars_b4") & (t8.tau == 1.0)]
    for family in ("gsm8k", "humaneval"):
        assert lossless[family].tolist() == greedy[family].tolist()
    t9 = frames["table9"]
    assert list(t9.method) == ["Jacobi decoding", "MARS (tau=0.95)"]
    assert {"ablation", "delta", "reference_avg", "delta_se"} <= set(frames["ablations"].columns)
    assert len(frames["ablations"]) == 7
    # the extra seed (configs/smoke.yaml: seed 1 of AR SFT 5 ep and MARS B=4): means over 2 runs, each listed
    seeded = t2.set_index("model")
    assert seeded.loc["mars_b4", "n_seeds"] == 2 and seeded.loc["base", "n_seeds"] == 1
    runs = [float(v) for v in str(seeded.loc["mars_b4", "avg_seeds"]).split(";")]
    assert seeded.loc["mars_b4", "avg"] == pytest.approx(sum(runs) / 2, abs=0.01)
    # every training run logged its held-out next-token loss
    models = workdir / "results" / "smoke" / "models"
    for model in ("base", "ar_sft_5ep", "mars_b4", "mars_b4_seed1"):
        metrics = json.loads((models / model / "metrics.json").read_text())
        assert math.isfinite(metrics["final_heldout_loss"]) and math.isfinite(metrics["final_train_slice_loss"])


def test_the_study_target_runs_every_point(smoke_run, tmp_path):
    """`snakemake study`: the scaling table and its two figures, from the smoke config's two points (default and
    one other size), on top of the built default run."""
    workdir, _ = smoke_run
    proc = snakemake(workdir, "--cores", "2", "study")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    table = pd.read_csv(workdir / "results" / "smoke" / "tables" / "scaling.csv")
    assert list(table.point) == ["default", "h16"]
    assert table.hidden_size.tolist() == [32, 16]
    assert table.parameters[1] < table.parameters[0]
    assert table.sft_records[1] == table.sft_records[0]  # the same SFT set
    for column in ("mars_minus_ar", "nolar_minus_ar", "cont_minus_ar", "ar_heldout_loss", "ar_train_loss"):
        assert table[column].map(math.isfinite).all(), column
    figures = workdir / "results" / "smoke" / "paper_figures"
    for stem in ("fig_scaling", "fig_heldout_loss"):
        assert (figures / f"{stem}.png").stat().st_size > 1000
    # a larger-SFT-set point (not run here: its rules are the size point's) is wired: the world writes train_x2 and
    # the point's four train jobs read it (a missing producer would fail the plan)
    path = edited(tmp_path, lambda c: [c[k].update(sft_scales=[2]) for k in ("world", "study")])
    jobs = planned(workdir, "study", config=path)
    assert jobs["world"] == 1 and jobs["scaling_table"] == 1  # the world is written again, with train_x2
    # so every study training runs again: the two points' (planned from scratch) and the x2 point's AR SFT, MARS,
    # MARS without L_AR and continuation
    (tmp_path / "empty").mkdir()
    two_points = planned(
        tmp_path / "empty", "study", config=edited(tmp_path, lambda c: c["world"].update(sft_scales=[2]))
    )
    assert jobs["train"] == two_points["train"] + 4


def test_every_figure_exists(smoke_run):
    workdir, _ = smoke_run
    figures = workdir / "results" / "smoke" / "paper_figures"
    for stem in FIGURES:
        for suffix in (".png", ".pdf"):
            path = figures / f"{stem}{suffix}"
            assert path.is_file() and path.stat().st_size > 1000, path


def test_rerun_is_a_no_op_and_a_deleted_result_rebuilds_only_what_uses_it(smoke_run):
    workdir, _ = smoke_run
    assert planned(workdir) == {}  # nothing to do
    victim = workdir / "results" / "smoke" / "eval" / "mars_bidir_b4" / "mars-tau1-probability" / "gsm8k.json"
    assert victim.is_file()
    kept = victim.with_name("kept.json.bak")
    shutil.copy2(victim, kept)  # (restored below, mtime included: the tests after this one see the finished run)
    victim.unlink()
    try:
        jobs = planned(workdir)
    finally:
        shutil.copy2(kept, victim)
        kept.unlink()
    # the one evaluation job that wrote it, and the one table that reads it (ablations), and the target
    assert jobs == {"evaluate": 1, "table": 1, "all": 1}, jobs
    assert planned(workdir) == {}


def test_report_html(smoke_run, tmp_path):
    workdir, _ = smoke_run
    report = workdir / "results" / "report.html"
    proc = snakemake(workdir, "--report", str(report))
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = report.read_text(errors="ignore")
    assert "table2" in text and "Figure 3" in text


# ---- a changed setting reruns exactly what it affects (Snakemake's params trigger on each job's `job` param)


def edited(tmp_path: Path, edit) -> Path:
    import yaml

    config = yaml.safe_load(CONFIG.read_text())
    edit(config)
    path = tmp_path / "edited.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def expected_jobs(config_path: Path, trained: set, evaluated: set, *, tables=None, bench=False, world=False) -> dict:
    """What a change must rerun: the `trained` models, the evaluations of the `evaluated` models (from the one
    declaration, mars.pipeline.experiments), the tables and figures that read them, the bench if it reads one."""
    import yaml

    from mars.pipeline import experiments as X
    from mars.pipeline.config import validate

    config = validate(yaml.safe_load(config_path.read_text()))
    settings = [s for s in X.all_settings(config) if s.model in evaluated]
    jobs = {
        "world": int(world),
        "train": len(trained),
        "evaluate": len({s for s in settings if s.kind == "eval"}),
        "evaluate_sweep": len({s for s in settings if s.kind == "sweep"}),
    }
    if tables is None:
        tables = {
            t
            for t in ("table2", "table3", "table4", "table8", "table9", "ablations")
            if {s.model for s in X.table_settings(config, t)} & evaluated
        }
    jobs["table"] = len(tables)
    jobs["cost_table"] = int(bool(trained))
    jobs["figure1"] = int(config["eval"]["figure1"]["model"] in evaluated)
    jobs["figure3"] = int(bool({"table2", "table8"} & set(tables)))
    jobs["figure6"] = int(config["eval"]["metric_model"] in evaluated)
    jobs["bench"] = jobs["table5"] = jobs["figure_wallclock"] = int(bench or config["bench"]["model"] in trained)
    jobs["all"] = 1
    return {k: v for k, v in jobs.items() if v}


def test_a_learning_rate_reruns_that_model_its_descendants_their_evaluations_and_tables(smoke_run, tmp_path):
    workdir, _ = smoke_run
    path = edited(tmp_path, lambda c: c["models"]["ar_sft_10ep"].update(learning_rate=1e-3))
    assert planned(workdir, config=path) == expected_jobs(path, {"ar_sft_10ep"}, {"ar_sft_10ep"})
    # AR SFT (5 ep) starts every MARS model and ablation: all of them, not the base, not the 10-epoch control; its
    # extra-seed run is trained with the same entry, and the extra-seed MARS run starts from that
    path = edited(tmp_path, lambda c: c["models"]["ar_sft_5ep"].update(learning_rate=1e-3))
    descendants = {
        "ar_sft_5ep",
        "ar_sft_5ep_seed1",
        "mars_b4_seed1",
        "mars_b4",
        "mars_b8",
        "mars_b16",
        "mars_nolar_b4",
        "mars_nolar_b8",
        "mars_nolar_b16",
        "mars_bidir_b4",
        "block_diffusion_b4",
    }
    jobs = planned(workdir, config=path)
    assert jobs == expected_jobs(path, descendants, descendants)
    assert jobs["train"] == 11


def test_the_world_seed_reruns_everything(smoke_run, tmp_path):
    workdir, _ = smoke_run
    path = edited(tmp_path, lambda c: c["world"].update(seed=1))
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert planned(workdir, config=path) == planned(fresh, config=path)


def test_the_generation_budget_reruns_evaluations_and_tables_only(smoke_run, tmp_path):
    workdir, _ = smoke_run
    path = edited(tmp_path, lambda c: c["eval"].update(max_gen_toks=16))
    import yaml

    from mars.pipeline.config import validate

    # every model, the extra-seed runs included (their evaluations decode with the same budget)
    everything = {*validate(yaml.safe_load(CONFIG.read_text()))["models"], "base"}
    jobs = planned(workdir, config=path)
    assert jobs == expected_jobs(path, set(), everything)
    assert "train" not in jobs and "bench" not in jobs


def test_bench_repetitions_rerun_the_bench_and_table5_only(smoke_run, tmp_path):
    workdir, _ = smoke_run
    path = edited(tmp_path, lambda c: c["bench"].update(reps=2))
    assert planned(workdir, config=path) == {"bench": 1, "table5": 1, "figure_wallclock": 1, "all": 1}
    # the same change as a command-line override reaches the job too
    assert planned(workdir, "--config", "bench={reps: 2}") == {"bench": 1, "table5": 1, "figure_wallclock": 1, "all": 1}


def test_a_new_sweep_tau_runs_only_its_sweep_jobs_and_the_tables_that_read_them(smoke_run, tmp_path):
    workdir, _ = smoke_run
    path = edited(tmp_path, lambda c: c["eval"].update(sweep_taus=[1.0, 0.8, 0.5]))
    # two sweep models and the lossless model (mars_b4) at the new tau; Table 8 and Figure 3 (which reads it)
    assert planned(workdir, config=path) == {"evaluate_sweep": 3, "table": 1, "figure3": 1, "all": 1}
