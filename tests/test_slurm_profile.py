"""The SLURM profile (slurm/config.yaml) and the local cluster script, checked without a cluster.

A fake `sinfo` on PATH stands in for the cluster the profile probes, so the tests behave the same on a laptop, in CI
(before or after scripts/slurm_cluster.sh start) and on a cluster's login node.
"""

import os
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
    "SNAKEMAKE_PROFILE",
)

# sinfo --noheader --format=%P|%l|%G of a cluster like the CI one (no GPUs) and of a GPU cluster
CPU_CLUSTER = "debug*|infinite|(null)"
GPU_CLUSTER = "cpu*|2-00:00:00|(null)\ngpu|12:00:00|gpu:a100:4(S:0-1)"

# a workflow with the pipeline's rule names (no rule `evaluate`/`bench`: their set-resources must be harmless)
SNAKEFILE = """
rule all:
    input: "table.txt"
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
    assert found["world"]["runtime"] == "60" and found["train"]["runtime"] == str(24 * 60)


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
