"""The Snakemake workflow: dry runs schedule the expected jobs; bad configs stop before any job runs."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def dry_run(*args) -> tuple[int, str, dict]:
    """A dry run in an empty working directory (whatever results this checkout holds do not count)."""
    import tempfile

    if "--configfile" not in args:  # (after the targets: --configfile takes several values)
        args = (*args, "--configfile", str(ROOT / "config.yaml"))
    with tempfile.TemporaryDirectory() as workdir:
        proc = subprocess.run([*SNAKEMAKE, "--snakefile", str(ROOT / "Snakefile"), "--directory", workdir, "-n",
                               *args, "--quiet", "rules"], cwd=workdir, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    counts = {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", out, re.M)}
    return proc.returncode, out, counts


def test_default_config_schedules_the_whole_chain():
    code, out, jobs = dry_run()
    assert code == 0, out
    assert jobs["world"] == 1 and jobs["train"] == 11
    # Tables 2/3/4/9 and ablations: 11 models at tau 1.0, 8 MARS-decoded models at 0.95, Jacobi on AR SFT
    assert jobs["evaluate"] == 11 + 8 + 1
    # tau sweep: 6 models x 6 taus below 1.0 ... plus tau 1.0, and the acceptance metrics (entropy, margin)
    assert jobs["evaluate_sweep"] == 6 * 7 + 2 * 5
    assert jobs["bench"] == 1 and jobs["table"] == 6 and jobs["table5"] == 1
    for rule in ("figure1", "figure3", "figure6", "figure_wallclock"):
        assert jobs[rule] == 1


@pytest.mark.parametrize("config", ["configs/paper-0.5b.yaml", "configs/paper-7b.yaml"])
def test_paper_configs_schedule_the_same_chain_without_a_base_training(config):
    code, out, jobs = dry_run("--configfile", str(ROOT / config))
    assert code == 0, out
    assert jobs["train"] == 10  # the base is Qwen2.5-Instruct itself
    assert jobs["world"] == 1 and jobs["evaluate"] == 20 and jobs["bench"] == 1


def test_table2_alone_schedules_no_benchmark_and_no_sweep():
    code, out, jobs = dry_run("results/tables/table2.csv")
    assert code == 0, out
    assert "bench" not in jobs and "evaluate_sweep" not in jobs and "table5" not in jobs
    assert jobs["evaluate"] == 6  # Base, AR 5 ep, AR 10 ep, block diffusion, MARS w/o L_AR, MARS (B=4)
    assert jobs["train"] == 6  # those five trained models and the base


def bad_config(tmp_path, edit) -> Path:
    config = yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text())
    edit(config)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.parametrize("edit,key", [
    (lambda c: c["models"]["mars_b4"].update(method="diffusion"), "mars_b4"),
    (lambda c: c["eval"].update(sweep_taus=[1.0, 1.5]), "sweep_taus"),
    (lambda c: c["bench"].update(tau=2.0), "bench"),
    (lambda c: c["models"]["mars_b8"].pop("block_size"), "block_size"),
    (lambda c: c["models"]["ar_sft_5ep"].update(epochs=-1), "epochs"),
    (lambda c: c["training"].update(learning_rat=1e-3), "learning_rat"),
])
def test_bad_configs_are_rejected_naming_the_key(tmp_path, edit, key):
    path = bad_config(tmp_path, edit)
    code, out, jobs = dry_run("--configfile", str(path))
    assert code != 0
    assert key in out
    assert not jobs  # nothing scheduled
    from mars.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=key):
        load_config(path)
