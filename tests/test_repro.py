"""The reproducible kernel mode (issue 41): the same weights whatever ISA and thread count a machine forces; without
it, another kernel choice trains other weights. Every run records its machine, and the tables say which.
(benchmarks/kernel_knobs.py measures each kernel choice on the tiny default's model size.)"""

import concurrent.futures
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from mars.pipeline.config import load_config
from mars.pipeline.jobs import eval_job, train_job
from mars.report.tables import with_machine
from mars.repro import KERNEL_VARIABLES, machine_class, reproducible_env

ROOT = Path(__file__).resolve().parents[1]

# one training run in a fresh process: the kernel variables are read when torch first runs a kernel
CHILD = """
import json, sys
from mars.pipeline.config import TrainSpec
from mars.training.train import train

a = json.loads(sys.argv[1])
spec = TrainSpec(method="mars", init="world", block_size=4, epochs=1, learning_rate=2e-3, batch_size=8,
                 max_length=64, max_steps=3, save_steps=100, logging_steps=1, warmup_ratio=0.0, eval_steps=None,
                 seed=0, threads=a["threads"], kernels=a["kernels"])
train(spec, init=a["init"], data_dir=a["data"], output=a["output"], experiment="repro", results_dir=a["results"])
"""


def _train(small_init: Path, out: Path, kernels: str, threads: int, env: dict) -> Path:
    environment = {k: v for k, v in os.environ.items() if k not in KERNEL_VARIABLES}
    environment.update(env, MLFLOW_TRACKING_URI=f"sqlite:///{out.parent / (out.name + '.db')}")
    args = dict(init=str(small_init / "init"), data=str(small_init / "data"), output=str(out), results=str(out.parent))
    args.update(kernels=kernels, threads=threads)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(args)], env=environment, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def _same(a: Path, b: Path) -> bool:
    x, y = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def _machine(folder: Path) -> dict:
    return json.loads((folder / "run_config.json").read_text())["machine"]


def test_reproducible_mode_trains_the_same_weights_under_other_isas_and_thread_counts(small_init, tmp_path):
    avx512 = "avx512f" in Path("/proc/cpuinfo").read_text()
    # the environment of a machine that chooses otherwise: wider ATen kernels, MKL's own branch capped at AVX2,
    # oneDNN capped at AVX2, two threads (the mode's own variables win over the first two)
    other_machine = {
        "ATEN_CPU_CAPABILITY": "avx512" if avx512 else "default",
        "MKL_CBWR": "AUTO",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
    }
    runs = {
        "repro": ("reproducible", 1, {}),
        "repro_other": ("reproducible", 2, other_machine),
        "native": ("native", 1, {}),
        "native_avx2": ("native", 1, {"ATEN_CPU_CAPABILITY": "avx2"}),
    }
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        futures = {n: pool.submit(_train, small_init, tmp_path / n, *run) for n, run in runs.items()}
        out = {n: f.result() for n, f in futures.items()}

    assert _same(out["repro"], out["repro_other"])
    facts = _machine(out["repro_other"])
    assert facts["kernel_mode"] == "reproducible" and facts["threads"] == 2 and facts["mkl_threads"] == 1
    assert (facts["cpu_capability"], facts["mkl_cbwr"]) == ("AVX2", "COMPATIBLE")
    assert facts["kernel_variables"]["MKL_ENABLE_INSTRUCTIONS"] == "AVX2"  # what the environment forced
    assert _machine(out["native"])["kernel_mode"] == "native"
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'repro_other.db'}")
    run = client.get_run(json.loads((out["repro_other"] / "run_config.json").read_text())["mlflow_run_id"])
    assert run.data.tags["machine.kernel_mode"] == "reproducible" and run.data.params["kernels"] == "reproducible"
    assert run.data.tags["machine.cpu_capability"] == "AVX2"

    # without the mode, another kernel choice trains other weights: ATen's AVX2 kernels instead of its AVX-512 ones
    # (on a CPU with AVX-512; measured so on 2-core AMD EPYC machines)
    if _machine(out["native"])["cpu_capability"] == "AVX512":
        assert not _same(out["native"], out["native_avx2"])


def test_mkls_compatible_branch_needs_one_thread_for_the_same_bits():
    # why the mode keeps MKL on one thread: its COMPATIBLE branch splits a product's rows over its threads, and the
    # rows past the last full block sum in another order (measured on 2-core AMD EPYC: 362 rows differ, 360 do not)
    code = """
import json, torch
from mars.repro import pin_mkl_threads
torch.manual_seed(0)
bias, x, w = torch.randn(128), torch.randn(362, 128), torch.randn(128, 128)
out = {}
for name, threads, pin in (("one", 1, False), ("two", 2, False), ("two_pinned", 2, True)):
    torch.set_num_threads(threads)
    if pin:
        pin_mkl_threads()
    out[name] = torch.addmm(bias, x, w)
print(json.dumps({k: torch.equal(out["one"], v) for k, v in out.items()}))
"""
    env = {k: v for k, v in os.environ.items() if k not in KERNEL_VARIABLES} | reproducible_env()
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == {"one": True, "two": False, "two_pinned": True}


def test_the_mode_refuses_a_process_whose_kernels_are_already_chosen(tmp_path):
    code = (
        "import torch; torch.ones(64).sum(); torch.ones(4, 4) @ torch.ones(4, 4)\n"
        "from mars.repro import apply_kernel_mode; apply_kernel_mode('reproducible')"
    )
    env = {k: v for k, v in os.environ.items() if k not in KERNEL_VARIABLES}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "KernelModeError: kernel mode 'reproducible' could not take effect" in done.stderr
    assert "ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=COMPATIBLE" in done.stderr  # how to start it instead


def test_train_jobs_carry_the_kernel_mode_only_when_it_is_not_the_default():
    config = load_config(ROOT / "configs" / "smoke.yaml")
    assert "kernels" not in train_job(config, "mars_b4")["spec"]  # native: finished runs stay finished
    config["training"]["kernels"] = "reproducible"
    assert train_job(config, "mars_b4")["spec"]["kernels"] == "reproducible"


def test_eval_jobs_decode_in_the_mode_their_models_train_in():
    config = load_config(ROOT / "configs" / "smoke.yaml")
    assert "kernels" not in eval_job(config, "mars_b4", "mars", 0.9, "probability", "eval")
    config["training"]["kernels"] = "reproducible"
    assert eval_job(config, "mars_b4", "mars", 0.9, "probability", "eval")["kernels"] == "reproducible"


def test_mars_eval_decodes_with_the_kernels_its_mode_names_whatever_the_environment_chose(trained_tiny, tmp_path):
    """``mars eval --kernels reproducible`` runs the mode's kernels though the environment asked for others, and its
    record says so; without the flag the environment's choice stands (and is recorded)."""
    avx512 = "avx512f" in Path("/proc/cpuinfo").read_text()
    forced = {"ATEN_CPU_CAPABILITY": "avx512" if avx512 else "default", "MKL_CBWR": "AUTO"}
    environment = {k: v for k, v in os.environ.items() if k not in KERNEL_VARIABLES} | forced
    machines = {}
    for mode in ("reproducible", None):
        out = tmp_path / f"{mode}.json"
        command = [sys.executable, "-m", "mars.cli", "eval", "--model", str(trained_tiny["ar"]), "--tasks"]
        command += ["tiny_gsm8k", "--data", str(trained_tiny["world"] / "data"), "--method", "ar", "--tau", "1.0"]
        command += ["--limit", "1", "--batch-size", "1", "--max-gen-toks", "8", "--output", str(out)]
        command += ["--kernels", mode] if mode else []
        done = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        record = json.loads(out.read_text())
        machines[mode] = record["machine"]
        assert record["eval_args"].get("kernels") == mode
    assert machines["reproducible"]["kernel_mode"] == "reproducible"
    assert (machines["reproducible"]["cpu_capability"], machines["reproducible"]["mkl_cbwr"]) == ("AVX2", "COMPATIBLE")
    assert machines[None]["kernel_mode"] == "native"
    assert machines[None]["cpu_capability"] == ("AVX512" if avx512 else "DEFAULT")
    assert machines[None]["mkl_cbwr"] == "AUTO"


def test_tables_say_which_machine_class_and_mode_trained_each_row(tmp_path):
    facts = {
        "kernel_mode": "reproducible",
        "cpu_model": "AMD EPYC",
        "cpu_id": "25/17/1",
        "cpu_capability": "AVX2",
        "mkl_cbwr": "COMPATIBLE",
        "threads": 1,
        "torch": "2.13.0+cpu",
    }
    line = "AMD EPYC (25/17/1), AVX2 + MKL COMPATIBLE, 1 thread, torch 2.13.0+cpu, reproducible kernels"
    assert machine_class(facts) == line
    other = {**facts, "kernel_mode": "native", "cpu_capability": "AVX512", "mkl_cbwr": "OFF", "threads": 2}
    other_line = "AMD EPYC (25/17/1), AVX512 + MKL OFF, 2 threads, torch 2.13.0+cpu, native kernels"
    models = tmp_path / "models"
    for model, machine in (("mars_b4", facts), ("mars_b4_seed1", other), ("mars_b4_seed2", facts), ("ar", None)):
        (models / model).mkdir(parents=True)
        record = {"spec": {}} if machine is None else {"spec": {}, "machine": machine}
        (models / model / "run_config.json").write_text(json.dumps(record))
    job = {"models": {m: {} for m in ("mars_b4", "mars_b4_seed1", "mars_b4_seed2", "ar", "hub")}}
    frame = pd.DataFrame({"model": ["mars_b4", "ar", "hub"], "avg": [1.0, 2.0, 3.0]})
    out = with_machine(frame, job, tmp_path)
    # the row's model and its seed runs, each class once; nothing for a run without a record or a hub checkpoint
    assert list(out.trained_on) == [f"{line} | {other_line}", "", ""]
    assert "trained_on" not in with_machine(frame, job, None).columns  # no results folder: nothing to read


@pytest.mark.parametrize("mode", ["native", "reproducible"])
def test_reproducible_env_names_the_variables_of_each_mode(mode):
    env = reproducible_env(mode)
    assert set(env) <= set(KERNEL_VARIABLES)
    assert env == ({} if mode == "native" else {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE"})
