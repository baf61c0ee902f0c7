"""The SLURM profile (slurm/config.yaml) and the local cluster script, checked without a cluster.

A fake `sinfo` on PATH stands in for the cluster the profile probes, so the tests behave the same on a laptop, in CI
(before or after scripts/slurm_cluster.sh start) and on a cluster's login node.
"""

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PROFILE_DIR = ROOT / "slurm"
PROFILE = PROFILE_DIR / "config.yaml"
CLUSTER_SCRIPT = ROOT / "scripts" / "slurm_cluster.sh"
ENV_VARS = (
    "MARS_SLURM_PARTITION",
    "SBATCH_PARTITION",
    "MARS_SLURM_ACCOUNT",
    "SBATCH_ACCOUNT",
    "MARS_SLURM_GPUS",
    "MARS_SLURM_TRAIN_GPUS",
    "MARS_SLURM_CPUS_PER_GPU",
    "MARS_SLURM_MEM_MB_PER_GPU",
    "MARS_SLURM_CPU_PARTITION",
    "SNAKEMAKE_PROFILE",
)

# sinfo --noheader --format=%P|%l|%G of a cluster like the CI one (no GPUs) and of a GPU cluster
CPU_CLUSTER = "debug*|infinite|(null)"
GPU_CLUSTER = "cpu*|2-00:00:00|(null)\ngpu|12:00:00|gpu:a100:4(S:0-1)"

# a workflow with the pipeline's rule names (no rule `evaluate`/`bench`: their set-resources must be harmless)
SNAKEFILE = """
rule all:
    input: "table.txt", "figure.txt"
rule world:
    output: "world.txt"
    shell: "touch {output}"
rule train:
    input: "world.txt"
    output: "train.txt"
    threads: 2
    shell: "touch {output}"
rule table_main:
    input: "train.txt"
    output: "table.txt"
    shell: "touch {output}"
rule figure1:
    input: "table.txt"
    output: "figure.txt"
    shell: "touch {output}"
"""


@pytest.fixture
def fake_cluster(tmp_path, monkeypatch):
    """Set the cluster that the profile sees: fake_cluster(sinfo output or None for 'no answer', accounting=...)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for var in ENV_VARS:
        monkeypatch.delenv(var, raising=False)

    def write(name, script):
        path = bin_dir / name
        path.write_text(script)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)

    def set_cluster(sinfo_output, accounting=False):
        if sinfo_output is None:
            write("sinfo", "#!/bin/sh\necho 'sinfo: error: Unable to contact slurm controller' >&2\nexit 1\n")
        else:
            write("sinfo", f"#!/bin/sh\ncat <<'EOF'\n{sinfo_output}\nEOF\n")
        write(
            "sacct",
            "#!/bin/sh\nexit 0\n"
            if accounting
            else "#!/bin/sh\necho 'Slurm accounting storage is disabled' >&2\nexit 1\n",
        )
        # (also restores PATH after the test: rendering the profile prepends the interpreter's bin folder)
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    return set_cluster


def render():
    """The profile as Snakemake reads it: YTE-rendered, flattened into {option: value or list of 'k=v'}."""
    from snakemake.profiles import ProfileConfigFileParser

    with open(PROFILE) as stream:
        return dict(ProfileConfigFileParser().parse(stream))


def resources(parsed, key):
    return dict(item.split("=", 1) for item in parsed.get(key, []))


def test_profile_is_yaml_and_names_the_slurm_executor():
    raw = yaml.safe_load(PROFILE.read_text())
    assert isinstance(raw, dict)
    assert raw["executor"] == "slurm"
    assert raw["__use_yte__"] is True  # else Snakemake would not render the ?-expressions
    assert raw["retries"] == 0 and raw["rerun-incomplete"] is True
    # training alone is resubmitted after preemption or its time limit (it resumes from its checkpoint)
    assert raw["preemptible-rules"] == ["train"] and raw["preemptible-retries"] >= 1
    assert int(raw["jobs"]) >= 1 and int(raw["latency-wait"]) >= 5


def test_no_hard_coded_account_or_partition(fake_cluster, monkeypatch):
    text = PROFILE.read_text()
    assert "--account" not in text and "-A " not in text
    fake_cluster(CPU_CLUSTER)
    defaults = resources(render(), "default-resources")
    assert "slurm_account" not in defaults and "slurm_partition" not in defaults
    # both come from the environment only, quoted so Snakemake keeps them strings (an account may be all digits)
    monkeypatch.setenv("MARS_SLURM_ACCOUNT", "12345")
    monkeypatch.setenv("SBATCH_PARTITION", "gpu-a100")
    defaults = resources(render(), "default-resources")
    assert defaults["slurm_account"] == "'12345'" and defaults["slurm_partition"] == "'gpu-a100'"
    monkeypatch.setenv("MARS_SLURM_PARTITION", "short")  # the project's variable wins over sbatch's
    assert resources(render(), "default-resources")["slurm_partition"] == "'short'"


def test_keys_are_snakemake_options(fake_cluster):
    from snakemake.cli import get_argument_parser

    fake_cluster(CPU_CLUSTER)
    parser = get_argument_parser()
    options = {opt for action in parser._actions for opt in action.option_strings}
    keys = set(render())
    assert "executor" in keys and "default-resources" in keys
    unknown = sorted(key for key in keys if f"--{key}" not in options)
    assert not unknown, f"not options of snakemake {parser.prog}: {unknown}"


def dry_run(tmp_path, *args):
    """`snakemake --profile <this profile> -n` on the tiny workflow; returns {rule: {resource: value}}."""
    work = tmp_path / "wf"
    work.mkdir(exist_ok=True)
    (work / "Snakefile").write_text(SNAKEFILE)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "--cores",
            "all",
            "--profile",
            str(PROFILE_DIR),
            "-n",
            "--forceall",
            "--nolock",
            *args,
        ],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out, rule, found = proc.stdout + proc.stderr, None, {}
    for line in out.splitlines():
        line = line.strip()
        if line.startswith(("rule ", "localrule ")):
            rule = line.split()[1].rstrip(":")
        elif line.startswith("resources:") and rule:
            found[rule] = dict(item.split("=", 1) for item in line[len("resources:") :].strip().split(", "))
    assert {"world", "train", "table_main"} <= set(found), out
    return found


def test_dry_run_on_a_cluster_without_gpus(tmp_path, fake_cluster):
    # the CI cluster: nothing asks for a GPU, every request fits a 2-core machine
    fake_cluster(CPU_CLUSTER)
    found = dry_run(tmp_path)
    for rule in ("world", "train", "table_main"):
        assert "gpu" not in found[rule] and "slurm_account" not in found[rule]
        assert int(found[rule]["mem_mb"]) <= 4000
    assert found["world"]["cpus_per_task"] == "1" and found["train"]["cpus_per_task"] == "2"  # = the rule's threads
    assert found["world"]["runtime"] == str(4 * 60) and found["train"]["runtime"] == str(24 * 60)
    assert found["table_main"]["runtime"] == "60"


def test_dry_run_on_a_gpu_cluster(tmp_path, fake_cluster, monkeypatch):
    fake_cluster(GPU_CLUSTER)
    monkeypatch.setenv("MARS_SLURM_PARTITION", "gpu")
    found = dry_run(tmp_path)
    assert found["train"]["gpu"] == "1" and found["train"]["slurm_partition"] == "gpu"
    assert found["train"]["runtime"] == str(12 * 60)  # capped to the partition's limit (24 h wanted)
    assert "gpu" not in found["world"] and "gpu" not in found["table_main"]
    monkeypatch.setenv("MARS_SLURM_TRAIN_GPUS", "4")  # multi-GPU training
    found = dry_run(tmp_path)
    assert found["train"]["gpu"] == "4" and found["train"]["cpus_per_task"] == "32"


def test_status_command_follows_accounting(fake_cluster):
    # without slurmdbd sacct fails, and the plugin's default (sacct) would never see a job finish: use squeue
    fake_cluster(CPU_CLUSTER, accounting=False)
    assert render()["slurm-status-command"] == "squeue"
    fake_cluster(CPU_CLUSTER, accounting=True)
    assert render()["slurm-status-command"] == "sacct"


def test_no_answer_from_sinfo_assumes_gpus(fake_cluster):
    # e.g. a login node whose sinfo is broken: ask for the GPUs the rules need rather than train on CPUs
    fake_cluster(None)
    sets = resources(render(), "set-resources")
    assert sets["train:gpu"] == "1" and sets["train:runtime"] == str(24 * 60)


def test_partition_time_limits(fake_cluster):
    fake_cluster(CPU_CLUSTER)
    definitions = {}
    for block in yaml.safe_load(PROFILE.read_text())["__definitions__"]:
        exec(block, definitions)
    minutes = definitions["minutes"]
    cases = {
        "infinite": None,
        "n/a": None,
        "": None,
        "30": 30,
        "30:00": 30,
        "30:30": 31,
        "12:00:00": 720,
        "1-00:00:00": 1440,
        "2-12": 3600,
        "1-01:30": 1530,
    }
    assert {limit: minutes(limit) for limit in cases} == cases


def test_cluster_script_is_valid_bash():
    subprocess.run(["bash", "-n", str(CLUSTER_SCRIPT)], check=True, timeout=30)
    proc = subprocess.run(["bash", str(CLUSTER_SCRIPT), "bogus"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and "start|stop|status" in proc.stderr


def test_the_sweep_gets_the_evaluations_gpus_and_training_a_warning_signal(fake_cluster, monkeypatch):
    from snakemake_executor_plugin_slurm.validation import get_forbidden_slurm_options

    fake_cluster(GPU_CLUSTER)
    monkeypatch.setenv("MARS_SLURM_PARTITION", "gpu")
    sets = resources(render(), "set-resources")
    evaluate = {k.split(":", 1)[1]: v for k, v in sets.items() if k.startswith("evaluate:")}
    sweep = {k.split(":", 1)[1]: v for k, v in sets.items() if k.startswith("evaluate_sweep:")}
    assert sweep == evaluate and sweep["gpu"] == "1"
    # the GPU jobs outside evaluation: the benchmark, and Table 6 with its four models loaded at once
    assert sets["bench:gpu"] == "1" and sets["speculate:gpu"] == "1"
    assert int(sets["speculate:mem_mb"]) == 2 * int(sets["bench:mem_mb"])
    assert sets["speculate:runtime"] == sets["bench:runtime"]
    # SIGTERM to every process of the job (no "B:" = not the batch shell alone) 5 minutes before the limit
    extra = sets["train:slurm_extra"].strip("'")
    assert extra == "--signal=TERM@300"
    assert not [p for p in get_forbidden_slurm_options() if re.search(p, extra)]  # the plugin accepts it


def test_cpu_jobs_go_to_the_cpu_partition(tmp_path, fake_cluster, monkeypatch):
    fake_cluster(GPU_CLUSTER)
    monkeypatch.setenv("MARS_SLURM_PARTITION", "gpu")
    found = dry_run(tmp_path)
    assert all(found[rule]["slurm_partition"] == "gpu" for rule in ("world", "train", "figure1"))  # unset: the same
    monkeypatch.setenv("MARS_SLURM_CPU_PARTITION", "cpu")
    found = dry_run(tmp_path)
    assert found["train"]["slurm_partition"] == "gpu" and found["train"]["gpu"] == "1"
    for rule in ("world", "figure1"):
        assert found[rule]["slurm_partition"] == "cpu" and "gpu" not in found[rule]
    assert found["world"]["runtime"] == str(4 * 60)  # under the cpu partition's 2-day limit
    sets = resources(render(), "set-resources")
    cpu_rules = {k.split(":")[0] for k, v in sets.items() if k.endswith(":slurm_partition") and v == "'cpu'"}
    assert cpu_rules == {
        "world", "table", "table5", "table6", "cost_table", "figure1", "figure3", "figure6", "figure_wallclock"
    }  # fmt: skip


RETRY_SNAKEFILE = """
rule all:
    input: "model.txt", "table.txt"
rule train:
    output: "model.txt"
    shell: "if [ -e attempt ]; then touch {output}; else touch attempt; exit 1; fi"
rule table_main:
    output: "table.txt"
    shell: "touch {output}"
"""


def test_a_killed_training_job_is_resubmitted_and_other_jobs_are_not(tmp_path, fake_cluster):
    """The profile's retry settings, on a local run: the first attempt of `train` dies (as a preempted job would),
    the second succeeds; a failing job of another rule fails the run at once."""
    fake_cluster(CPU_CLUSTER)
    profile = render()
    retry_args = [
        "--preemptible-rules",
        *profile["preemptible-rules"],
        "--preemptible-retries",
        profile["preemptible-retries"],
    ]
    work = tmp_path / "retry"
    work.mkdir()
    (work / "Snakefile").write_text(RETRY_SNAKEFILE)
    run = [sys.executable, "-m", "snakemake", "--cores", "1", "--nolock", "--retries", profile["retries"], *retry_args]
    proc = subprocess.run(run, cwd=work, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (work / "model.txt").exists() and (work / "attempt").exists()
    (work / "Snakefile").write_text(
        RETRY_SNAKEFILE.replace("rule table_main", "rule table_main_").replace(
            'shell: "touch {output}"', 'shell: "if [ -e tried ]; then touch {output}; else touch tried; exit 1; fi"'
        )
    )
    (work / "table.txt").unlink(missing_ok=True)
    proc = subprocess.run(run, cwd=work, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and not (work / "table.txt").exists()


LOCAL_RULES = """
import sys
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings, StorageSettings
with SnakemakeApi(OutputSettings(quiet=True)) as api:
    workflow = api.workflow(
        resource_settings=ResourceSettings(cores=1),
        config_settings=ConfigSettings(configfiles=[Path(sys.argv[2])]),
        storage_settings=StorageSettings(),
        snakefile=Path(sys.argv[1]),
        workdir=Path.cwd(),
    )._workflow
    print(*sorted(rule.name for rule in workflow.rules if rule.name in workflow._localrules))
"""


def test_pipeline_under_the_profile_prefetches_on_the_login_node(tmp_path, fake_cluster, monkeypatch):
    """The real workflow, paper config with an offline cache: `prefetch` runs locally (the compute nodes may have no
    network), the hf world is a SLURM job with the memory to hold the SFT set."""
    fake_cluster(GPU_CLUSTER)
    monkeypatch.setenv("MARS_SLURM_PARTITION", "gpu")
    config = yaml.safe_load((ROOT / "configs" / "paper-0.5b.yaml").read_text())
    config["offline"] = {"cache_dir": str(tmp_path / "cache")}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "--snakefile",
            str(ROOT / "Snakefile"),
            "--directory",
            str(tmp_path),
            "--configfile",
            str(tmp_path / "config.yaml"),
            "--cores",
            "all",
            "--profile",
            str(PROFILE_DIR),
            "-n",
            "--nolock",
            "results/paper-0.5b/world/data/train.jsonl",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert re.search(r"^rule prefetch:", out, re.M) and re.search(r"^rule world:", out, re.M), out[-3000:]
    # (a dry run prints every job as "rule"): ask Snakemake which rules it runs locally, never through sbatch
    local_rules = subprocess.run(
        [sys.executable, "-c", LOCAL_RULES, str(ROOT / "Snakefile"), str(tmp_path / "config.yaml")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert local_rules.returncode == 0, local_rules.stderr[-2000:]
    assert local_rules.stdout.split() == ["prefetch"]
    world = out[out.index("rule world:") :]
    world_resources = dict(item.split("=", 1) for item in re.search(r"resources: (.*)", world).group(1).split(", "))
    # the hf world streams the SFT set to train.jsonl (mars.training.data.export_hf_sft): the profile's default memory
    assert world_resources["mem_mb"] == "4000" and "gpu" not in world_resources
