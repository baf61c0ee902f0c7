"""End to end: the smoke config runs every rule of the workflow and produces every table and figure.

Slow (a few minutes on 2 cores), so marked; it still runs in CI.
"""

import math
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "configs" / "smoke.yaml"
TABLES = ["table2", "table3", "table4", "table5", "table8", "table9", "ablations"]
FIGURES = ["fig1_shaded_generation", "fig3_pareto", "fig6_acceptance_metrics", "fig_wallclock"]
ALL_RULES = {"world", "train", "evaluate", "evaluate_sweep", "bench", "table", "table5", "figure1", "figure3",
             "figure6", "figure_wallclock"}

pytestmark = pytest.mark.slow


def snakemake(workdir: Path, *args, timeout=1500) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"),
                           "--directory", str(workdir), "--configfile", str(CONFIG), *args],
                          capture_output=True, text=True, timeout=timeout, env=env)


def planned(workdir: Path, *args) -> dict:
    import re

    proc = snakemake(workdir, "-n", *args, "--quiet", "rules")
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
    assert list(t2["row"]) == ["Base", "AR SFT (5 ep)", "AR SFT (10 ep)", "Block Diffusion (B=4)",
                               "MARS w/o SFT loss (B=4)", "MARS (B=4)"]
    for column in [*families, "avg", "optimizer_steps", "cumulative_steps"]:
        assert t2[column].map(math.isfinite).all(), column
        assert ((t2[column] >= 0)).all()
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
    assert {"ar_hf_kv", "mars_none", "mars_cursor", "prompt_lookup", "mars_tau1"} <= set(t5.setting)
    assert "paper_speedup_vs_ar_kv" in t5 and t5.tokens_per_s.map(math.isfinite).all()
    t8 = frames["table8"]
    assert set(t8.model) == {"mars_b4", "mars_nolar_b4"} and set(t8.tau) == {1.0, 0.5}
    assert (t8[t8.tau == 1.0].tpf_gsm8k == 1.0).all()  # one-token mode: exactly one token per forward
    t9 = frames["table9"]
    assert list(t9.method) == ["Jacobi decoding", "MARS (tau=0.95)"]
    assert {"ablation", "delta", "reference_avg"} <= set(frames["ablations"].columns)
    assert len(frames["ablations"]) == 6


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
    victim.unlink()
    jobs = planned(workdir)
    # the one evaluation job that wrote it, and the one table that reads it (ablations), and the target
    assert jobs == {"evaluate": 1, "table": 1, "all": 1}, jobs


def test_report_html(smoke_run, tmp_path):
    workdir, _ = smoke_run
    report = workdir / "results" / "report.html"
    proc = snakemake(workdir, "--report", str(report))
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = report.read_text(errors="ignore")
    assert "table2" in text and "Figure 3" in text
