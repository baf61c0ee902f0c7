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
        proc = subprocess.run(
            [
                *SNAKEMAKE,
                "--snakefile",
                str(ROOT / "Snakefile"),
                "--directory",
                workdir,
                "-n",
                *args,
                "--quiet",
                "rules",
            ],
            cwd=workdir,
            capture_output=True,
            text=True,
            timeout=300,
        )
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


@pytest.mark.parametrize(
    "edit,message",
    [
        (lambda c: c["models"]["mars_b4"].update(method="diffusion"), "config key 'models.mars_b4.method'"),
        (lambda c: c["eval"].update(sweep_taus=[1.0, 1.5]), "config key 'eval.sweep_taus.1'"),
        (lambda c: c["bench"].update(tau=2.0), "config key 'bench.tau'"),
        (
            lambda c: c["models"]["mars_b8"].pop("block_size"),
            "config key 'models.mars_b8': 'block_size' is a required property",
        ),
        (lambda c: c["models"]["ar_sft_5ep"].update(epochs=-1), "config key 'models.ar_sft_5ep.epochs'"),
        (lambda c: c["training"].update(learning_rat=1e-3), "config key 'training': Additional properties"),
        # a model the tables name, renamed: one clear error, never a silently missing row
        (lambda c: c["models"].update(mars_b4_renamed=c["models"].pop("mars_b4")), "'mars_b4' is not a model entry"),
    ],
)
def test_bad_configs_are_rejected_naming_the_key(tmp_path, edit, message):
    path = bad_config(tmp_path, edit)
    code, out, jobs = dry_run("--configfile", str(path))
    assert code != 0
    error_lines = [line for line in out.splitlines() if line.startswith("config key")]
    assert len(error_lines) == 1 and message in error_lines[0], out[-2000:]
    assert not jobs  # nothing scheduled
    from mars.config import ConfigError, check_model_references, load_config

    with pytest.raises(ConfigError, match=re.escape(message)):
        check_model_references(load_config(path))


def printed_commands(config: Path) -> str:
    """The shell commands of a dry run of the whole workflow (-p), in an empty working directory."""
    import tempfile

    with tempfile.TemporaryDirectory() as workdir:
        proc = subprocess.run(
            [*SNAKEMAKE, "--snakefile", str(ROOT / "Snakefile"), "--directory", workdir, "-n", "-p"]
            + ["--configfile", str(config)],
            cwd=workdir,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def eval_jobs(stdout: str) -> dict:
    """{kind/model/setting: the --job settings of that mars eval command}."""
    import json

    jobs = {}
    for command in re.findall(r"mars eval --job .*", stdout):
        out = re.search(r"--output (\S+)", command).group(1)
        jobs["/".join(out.split("/")[-4:-1])] = json.loads(re.search(r"--job '([^']*)'", command).group(1))
    return jobs


def test_every_job_gets_its_settings_as_a_param_and_decodes_with_its_trained_block_size():
    """No job reads the config file itself: every command carries its settings (--job), and a B=16 model is
    evaluated with a window of 16 (15 masks) at tau < 1, B=8 with 8, Jacobi with the configured window."""
    stdout = printed_commands(ROOT / "config.yaml")
    assert not [c for c in stdout.splitlines() if "--config " in c]
    evals = eval_jobs(stdout)
    assert evals["eval/mars_b16/mars-tau0.95-probability"]["block_size"] == 16
    assert evals["sweep/mars_nolar_b16/mars-tau0.5-probability"]["block_size"] == 16
    assert evals["eval/mars_b8/mars-tau0.95-probability"]["block_size"] == 8
    assert evals["eval/ar_sft_5ep/jacobi-tau1-probability"]["block_size"] == 4
    assert evals["eval/ar_sft_5ep/ar-tau1-probability"]["method"] == "ar"
    assert evals["eval/mars_b16/mars-tau0.95-probability"]["max_gen_toks"] == 256
    assert len(evals) == 20 + 52


def test_paper_evaluations_get_the_harness_tasks_not_the_tiny_ones():
    """The paper profile's evaluation jobs name the six families, which `mars eval --profile paper` maps to the
    harness's own tasks (ifeval, bbh_cot_fewshot, ...); the tiny world's task names would be unknown there."""
    from mars.eval_tasks import resolve_tasks

    jobs = list(eval_jobs(printed_commands(ROOT / "configs" / "paper-0.5b.yaml")).values())
    assert jobs and all(job["profile"] == "paper" for job in jobs)
    harness = {task for job in jobs for task, _ in resolve_tasks(job["tasks"].split(","), "paper")}
    assert harness == {
        "ifeval",
        "bbh_cot_fewshot",
        "mmlu_pro",
        "gpqa_main_cot_zeroshot",
        "gsm8k_cot_zeroshot",
        "humaneval_instruct",
    }


def test_a_train_job_with_several_gpus_is_launched_with_one_process_per_gpu():
    """The job's resource `gpu` (slurm/config.yaml: MARS_SLURM_TRAIN_GPUS) decides the launch: plain `mars train`
    for one GPU or none, `accelerate launch` with the entry's accelerate config for more."""
    import tempfile

    def train_commands(*extra):
        with tempfile.TemporaryDirectory() as workdir:
            proc = subprocess.run(
                [*SNAKEMAKE, "--snakefile", str(ROOT / "Snakefile"), "--directory", workdir, "-n", "-p"]
                + ["--configfile", str(ROOT / "configs" / "paper-7b.yaml"), *extra],
                cwd=workdir,
                capture_output=True,
                text=True,
                timeout=300,
            )
        assert proc.returncode == 0, proc.stderr[-3000:]
        return [line for line in proc.stdout.splitlines() if " train --job " in line]

    plain = train_commands()
    assert plain and all("OMP_NUM_THREADS=1 mars train --job" in c for c in plain)
    fsdp = ROOT / "configs" / "accelerate" / "fsdp-qwen2.yaml"
    launched = train_commands("--set-resources", "train:gpu=8")
    assert len(launched) == len(plain)
    expected = f"accelerate launch --num_processes 8 --num_machines 1 --config_file {fsdp} -m mars.cli train --job"
    assert all(expected in c for c in launched), launched[0]
