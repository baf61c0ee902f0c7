"""The Snakemake workflow: dry runs schedule the expected jobs; bad configs stop before any job runs."""

import json
import os
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
    # 12 models (the AR continuation included), 5 of them with 2 extra seeds, Table 6's draft chain (base, AR, MARS)
    assert jobs["world"] == 1 and jobs["train"] == 12 + 5 * 2 + 3
    # Tables 2/3/4/9 and ablations: 12 models and 10 extra-seed runs at tau 1.0, 8 MARS-decoded models at 0.95,
    # Jacobi on AR SFT
    assert jobs["evaluate"] == 12 + 10 + 8 + 1
    # tau sweep: 6 models x 6 taus below 1.0 ... plus tau 1.0, and the acceptance metrics (entropy, margin),
    # and the lossless model (mars_b4) at the 6 taus below 1.0
    assert jobs["evaluate_sweep"] == 6 * 7 + 2 * 5 + 6
    assert jobs["bench"] == 1 and jobs["table"] == 6 and jobs["table5"] == 1
    assert jobs["speculate"] == 1 and jobs["table6"] == 1
    for rule in ("figure1", "figure3", "figure6", "figure_wallclock"):
        assert jobs[rule] == 1


@pytest.mark.parametrize("config", ["configs/paper-0.5b.yaml", "configs/paper-7b.yaml"])
def test_paper_configs_schedule_the_same_chain_without_a_base_training(config):
    code, out, jobs = dry_run("--configfile", str(ROOT / config))
    assert code == 0, out
    drafts = 2 if "7b" in config else 0  # Table 6 (7B only): the 0.5B draft's AR SFT and MARS
    assert jobs["train"] == 10 + drafts  # the base is Qwen2.5-Instruct itself
    assert jobs["world"] == 1 and jobs["evaluate"] == 20 and jobs["bench"] == 1
    assert jobs["evaluate_sweep"] == 6 * 7 + 2 * 5 + 6  # the lossless model: the bench model (mars_b4)
    assert jobs.get("speculate", 0) == jobs.get("table6", 0) == (1 if drafts else 0)


def test_table6_schedules_the_draft_chain_and_the_speculate_job_only():
    code, out, jobs = dry_run("results/tables/table6.csv")
    assert code == 0, out
    assert jobs["speculate"] == 1 and jobs["table6"] == 1
    # the targets (base -> AR SFT -> MARS B=4) and the draft chain; no evaluation, no benchmark
    assert jobs["train"] == 6 and "evaluate" not in jobs and "bench" not in jobs


def test_a_draft_starts_from_its_own_base_model_and_speculates_on_the_harness_questions():
    """An hf world's draft entry (init world, base_model) starts from its base_model, not world.base_model; the
    speculate job reads the harness's GSM8K questions and the four checkpoints."""
    stdout = printed_commands(ROOT / "configs" / "paper-7b.yaml")
    trains = [line for line in stdout.splitlines() if " train --job " in line]
    draft = next(line for line in trains if "models/draft_ar_sft_5ep " in line)
    assert "--init Qwen/Qwen2.5-0.5B-Instruct " in draft
    assert all(
        "--init Qwen/Qwen2.5-7B-Instruct " in line for line in trains if '"init":"world"' in line and line != draft
    )
    assert re.search(
        r"--init \S*models/draft_ar_sft_5ep ", next(line for line in trains if "models/draft_mars_b4 " in line)
    )
    command = re.search(r"mars speculate --job '([^']*)'(.*)", stdout)
    assert json.loads(command.group(1))["prompts"] == "gsm8k"
    assert re.search(r"--draft-mars \S*models/draft_mars_b4 ", command.group(2))


def test_table2_alone_schedules_no_benchmark_and_no_sweep():
    code, out, jobs = dry_run("results/tables/table2.csv")
    assert code == 0, out
    assert "bench" not in jobs and "evaluate_sweep" not in jobs and "table5" not in jobs
    # Base, AR 5 ep, AR 10 ep, block diffusion, MARS w/o L_AR, MARS (B=4); 2 more seeds of all but Base and BD
    assert jobs["evaluate"] == 6 + 4 * 2
    assert jobs["train"] == 6 + 4 * 2  # those five trained models, the base and the 8 extra-seed runs


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
        # a kind that is neither tiny nor hf is named as such (not as the hf branch's unexpected tiny keys)
        (lambda c: c["world"].update(kind="huge"), "config key 'world.kind': 'huge' is not one of ['tiny', 'hf']"),
        # a cycle of starts is named, not a missing report.base_model or Snakemake's CyclicGraphException
        (
            lambda c: c["models"]["base"].update(init="mars_b4"),
            "config key 'models.base.init': the starts form a cycle, base -> mars_b4 -> ar_sft_5ep -> base",
        ),
        (
            lambda c: c["models"]["mars_b8"].update(init="mars_b16") or c["models"]["mars_b16"].update(init="mars_b8"),
            # (the first of them in the file, whose keys yaml.safe_dump sorted)
            "config key 'models.mars_b16.init': the starts form a cycle, mars_b16 -> mars_b8 -> mars_b16",
        ),
        # a model the tables name, renamed: one clear error, never a silently missing row
        (lambda c: c["models"].update(mars_b4_renamed=c["models"].pop("mars_b4")), "'mars_b4' is not a model entry"),
        # Table 6: a fresh architecture only for a model started from the world; drafts must be model entries
        (
            lambda c: c["models"]["mars_b4"].update(architecture={"hidden_size": 32}),
            "config key 'models.mars_b4.architecture': only a model with init 'world'",
        ),
        (
            lambda c: c["models"]["ar_sft_5ep"].update(base_model="Qwen/Qwen2.5-0.5B-Instruct"),
            "config key 'models.ar_sft_5ep.base_model'",
        ),
        (
            lambda c: c.update(
                speculative={
                    "target_ar": "ar_sft_5ep",
                    "target_mars": "mars_b4",
                    "draft_ar": "nope",
                    "draft_mars": "mars_b4",
                }
            ),
            "config key 'speculative.draft_ar': 'nope' is not a model entry",
        ),
        (
            lambda c: c.update(
                speculative={
                    "target_ar": "ar_sft_5ep",
                    "target_mars": "mars_b4",
                    "draft_ar": "ar_sft_5ep",
                    "draft_mars": "mars_b8",
                }
            ),
            "config key 'speculative.draft_mars': block size 8 differs",
        ),
    ],
)
def test_bad_configs_are_rejected_naming_the_key(tmp_path, edit, message):
    path = bad_config(tmp_path, edit)
    code, out, jobs = dry_run("--configfile", str(path))
    assert code != 0
    lines = [line for line in out.splitlines() if line.strip()]
    # the project's line is the whole output: first, alone, naming the key and the config file
    assert len(lines) == 1 and lines[0].startswith("error: config key") and message in lines[0], out[-2000:]
    assert lines[0].endswith(f"(config: {path})")
    assert not jobs  # nothing scheduled
    from mars.pipeline.config import ConfigError, check_model_references, load_config

    with pytest.raises(ConfigError, match=re.escape(message)):
        check_model_references(load_config(path))


def test_without_a_config_file_the_line_says_where_it_looked(tmp_path):
    """Run outside the repository with no --configfile: the project's line, not Snakemake's traceback."""
    proc = subprocess.run(
        [*SNAKEMAKE, "--snakefile", str(ROOT / "Snakefile"), "-n"], cwd=tmp_path, capture_output=True, text=True
    )
    assert proc.returncode == 2
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert lines == [f"error: no config.yaml in {tmp_path}: run from the repository, or give --configfile FILE"]


def test_the_readme_says_what_snakemake_itself_answers_and_the_working_form(tmp_path):
    """Three mistakes stop Snakemake before the Snakefile runs, so the workflow cannot answer them in its own line:
    the README's note quotes what Snakemake says to each, and its working form of a nested --config key works."""
    section = (ROOT / "README.md").read_text().split("## When Snakemake answers first", 1)[1].split("\n## ", 1)[0]
    (tmp_path / "notes.txt").write_text("a: [1, 2\n")
    cases = [
        (("--configfile", str(tmp_path / "my.yaml")), "No such file or directory: '{}'".format(tmp_path / "my.yaml")),
        (("--configfile", str(tmp_path / "notes.txt")), "Config file is not valid JSON or YAML"),
        (("--config", "training.batch_size=8"), "Config entry must start with a valid identifier"),
    ]
    for args, says in cases:
        code, out, jobs = dry_run(*args)
        assert code != 0 and says in out and not jobs, out[-2000:]
        assert says.replace(str(tmp_path) + "/", "") in section
    assert "`--config 'training={batch_size: 8}'`" in section
    code, out, jobs = dry_run("--config", "training={batch_size: 8}", "--configfile", str(ROOT / "configs/smoke.yaml"))
    assert code == 0 and jobs["train"], out[-2000:]


def printed_commands(*configs: Path) -> str:
    """The shell commands of a dry run of the whole workflow (-p), in an empty working directory (several configs:
    merged by Snakemake, the later ones key by key over the earlier)."""
    import tempfile

    with tempfile.TemporaryDirectory() as workdir:
        proc = subprocess.run(
            [*SNAKEMAKE, "--snakefile", str(ROOT / "Snakefile"), "--directory", workdir, "-n", "-p"]
            + ["--configfile", *map(str, configs)],
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
    lossless = {k: v for k, v in evals.items() if "mars_lossless" in k}
    assert sorted(lossless) == sorted(
        f"sweep/mars_b4/mars_lossless-tau{t}-probability" for t in (0.95, 0.9, 0.8, 0.7, 0.6, 0.5)
    )
    assert all(v["method"] == "mars_lossless" and v["block_size"] == 4 for v in lossless.values())
    assert len(evals) == 20 + 52 + 6 + 11  # + the AR continuation and the 10 extra-seed runs at tau 1.0


def test_paper_evaluations_get_the_harness_tasks_not_the_tiny_ones():
    """The paper profile's evaluation jobs name the six families, which `mars eval --profile paper` maps to the
    harness's own tasks (ifeval, bbh_cot_fewshot, ...); the tiny world's task names would be unknown there."""
    from mars.evaluation.tasks import resolve_tasks

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


def merged_config(tmp_path, base: str, **overlay) -> Path:
    """A paper config with some keys overlaid, as Snakemake would merge a second --configfile."""
    config = yaml.safe_load((ROOT / base).read_text())
    for key, value in overlay.items():
        config[key] = {**config.get(key, {}), **value} if isinstance(value, dict) else value
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def job_blocks(stdout: str) -> list[tuple[str, str]]:
    """(rule name, the job's printed block: input, output, shell command) of a dry run with -p."""
    parts = re.split(r"^\[[^\]]+\]\n(?=(?:local)?rule )", stdout, flags=re.M)
    return [(re.match(r"(?:local)?rule (\w+):", p).group(1), p) for p in parts if re.match(r"(?:local)?rule ", p)]


def test_offline_cache_runs_every_hub_reading_job_offline_after_one_prefetch(tmp_path):
    cache = tmp_path / "hf-cache"
    stdout = printed_commands(merged_config(tmp_path, "configs/paper-0.5b.yaml", offline={"cache_dir": str(cache)}))
    blocks = job_blocks(stdout)
    flag = str(cache / "prefetched" / "paper-0.5b.json")
    prefetches = [block for rule, block in blocks if rule == "prefetch"]
    assert len(prefetches) == 1 and f"output: {flag}" in prefetches[0]
    assert "mars prefetch" in prefetches[0] and "HF_HUB_OFFLINE" not in prefetches[0]  # it is the one that fetches
    offline = (
        f"HF_HOME={cache}/huggingface HF_HUB_CACHE={cache}/huggingface/hub "
        f"HF_DATASETS_CACHE={cache}/huggingface/datasets NLTK_DATA={cache}/nltk_data "
        "HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "
    )
    compute = [
        (rule, block) for rule, block in blocks if rule in ("world", "train", "evaluate", "evaluate_sweep", "bench")
    ]
    assert {rule for rule, _ in compute} == {"world", "train", "evaluate", "evaluate_sweep", "bench"}
    for rule, block in compute:
        command = re.search(r"^(.*(?:mars|python -m mars\.launch [^)]*\)) (?:world|train|eval|bench) .*)$", block, re.M)
        command = command.group(1)
        after = {"world": "mars world", "bench": "mars bench"}.get(rule, "OMP_NUM_THREADS")
        assert offline + after in command, (rule, command)
    # the prefetch is upstream: the world and every evaluation (the harness data) take its output as input
    for rule, block in blocks:
        if rule in ("world", "evaluate", "evaluate_sweep"):
            assert flag in re.search(r"input: (.*)", block).group(1), rule
    # the training of the hub model itself reads the cache too
    base = next(b for r, b in blocks if r == "train" and "--init Qwen/Qwen2.5-0.5B-Instruct" in b)
    assert flag in base


def test_without_the_cache_key_nothing_changes(tmp_path):
    stdout = printed_commands(ROOT / "configs" / "paper-0.5b.yaml")
    assert "HF_HUB_OFFLINE" not in stdout and "prefetch" not in stdout


def test_a_mirror_overlay_trains_and_evaluates_the_local_stand_ins(tmp_path):
    """`mars mirror`'s overlay on configs/paper-0.5b.yaml: the same rules, the model and data set local folders."""
    from mars.pipeline.mirror import overlay

    model, data = tmp_path / "models" / "Qwen2.5-0.5B-Instruct", tmp_path / "datasets" / "Dolci-Instruct-SFT"
    keys = overlay("0.5b", model, data)
    stdout = printed_commands(merged_config(tmp_path, "configs/paper-0.5b.yaml", **keys))
    assert f"--init {model.resolve()} " in stdout
    assert f'"dataset":"{data.resolve()}"' in stdout
    assert "results/paper-0.5b-mirror/world" in stdout and "results/paper-0.5b/" not in stdout


def test_paper_jobs_read_the_harness_mirror_as_a_param_and_an_input(tmp_path):
    """eval.harness_data: every paper evaluation job carries the mirror folder in its job param (pointing it elsewhere
    reruns them) and as an input; the benchmark reads the mirror's GSM8K test split (an hf world's SFT records hold
    no GSM8K prompts); both load their models in eval.dtype."""
    from mars.evaluation.tasks.mirror import write_harness_mirror

    mirror = tmp_path / "mirror"
    write_harness_mirror(mirror)
    config = yaml.safe_load((ROOT / "configs" / "paper-0.5b.yaml").read_text())
    config["eval"]["harness_data"] = str(mirror)
    path = tmp_path / "paper.yaml"
    path.write_text(yaml.safe_dump(config))
    stdout = printed_commands(path)
    jobs = eval_jobs(stdout)
    assert jobs and all(job["harness_data"] == str(mirror) and job["dtype"] == "auto" for job in jobs.values())
    inputs = re.findall(r"^\s*input: (.*)$", stdout, re.M)
    assert sum(str(mirror) in line.split(", ") for line in inputs) >= len(jobs)
    bench = json.loads(re.search(r"mars bench --job '([^']*)'", stdout).group(1))
    assert bench["prompts"] == "gsm8k" and bench["harness_data"] == str(mirror) and bench["dtype"] == "auto"
    assert str(mirror / "openai" / "gsm8k" / "main" / "test.jsonl") in stdout


def test_a_train_job_is_launched_by_its_processes_and_gpus_which_rerun_nothing(tmp_path):
    """mars.launch decides the launch at run time: plain `mars train` for one process, `accelerate launch` with
    the entry's accelerate config, one process per visible GPU (or training.processes), for more. None of it is in
    the job's params: a new GPU or process count must not rerun a finished model."""
    from mars.launch import train_launcher

    def train_commands(*extra):
        proc = subprocess.run(
            [*SNAKEMAKE, "--snakefile", str(ROOT / "Snakefile"), "--directory", str(tmp_path), "-n", "-p"]
            + ["--configfile", str(ROOT / "configs" / "paper-7b.yaml"), *extra],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        return [line for line in proc.stdout.splitlines() if " train --job " in line]

    expansions = {}

    def launched(command):
        """What the printed command's $(python -m mars.launch ...) expands to, run as the job would run it (once per
        distinct expression: the jobs of one launch share it)."""
        expression = re.search(r"\$\((python -m mars\.launch [^)]*)\)", command).group(1)
        if expression not in expansions:
            expansions[expression] = expand(expression)
        return expansions[expression]

    def expand(expression):
        env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])}
        out = subprocess.run(expression, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    fsdp = ROOT / "configs" / "accelerate" / "fsdp-qwen2.yaml"
    plain = train_commands()
    assert plain and all(launched(c) == "mars" for c in plain)  # no GPU here, no processes set
    two = tmp_path / "two.yaml"
    two.write_text("training:\n  processes: 2\n")
    cpu = train_commands(str(two))
    prefix = "accelerate launch --num_processes 2 --num_machines 1 --main_process_port "
    suffix = f" --config_file {fsdp} -m mars.cli"
    for command in cpu:
        text = launched(command)
        assert text.startswith(prefix) and text.endswith(suffix) and text[len(prefix) : -len(suffix)].isdigit()
    # the job param (what Snakemake compares to rerun a job) is the same with 1 or 2 processes
    assert len(cpu) == len(plain)
    # (sorted: a dry run lists independent jobs in no fixed order)
    assert sorted(c.split(" train ", 1)[1] for c in cpu) == sorted(c.split(" train ", 1)[1] for c in plain)
    # one process per GPU where the job sees GPUs
    eight = train_launcher(8, "configs/accelerate/fsdp-qwen2.yaml", ROOT, None, port=29600)
    assert eight == f"accelerate launch --num_processes 8 --num_machines 1 --main_process_port 29600{suffix}"
    assert train_launcher(1, "configs/accelerate/fsdp-qwen2.yaml", ROOT) == "mars"


def test_the_7b_mirror_overlay_starts_the_draft_from_the_05b_stand_in(tmp_path):
    """`mars mirror --shape 7b`'s overlay, laid over configs/paper-7b.yaml as the rehearsal lays it (Snakemake merges
    a second --configfile key by key): the 7B stand-in is the world's start, the 0.5B stand-in the draft's."""
    from mars.pipeline.mirror import overlay

    models, data = tmp_path / "models", tmp_path / "datasets" / "Dolci-Instruct-SFT"
    keys = overlay("7b", models / "Qwen2.5-7B-Instruct", data, draft_dir=models / "Qwen2.5-0.5B-Instruct")
    path = tmp_path / "overlay.yaml"
    path.write_text(yaml.safe_dump(keys))
    out = printed_commands(ROOT / "configs" / "paper-7b.yaml", path)
    trains = [line for line in out.splitlines() if " train --job " in line]
    assert len(trains) == 12 and len(re.findall(r"mars speculate --job", out)) == 1
    draft = next(line for line in trains if "models/draft_ar_sft_5ep " in line)
    assert f"--init {(models / 'Qwen2.5-0.5B-Instruct').resolve()} " in draft
    assert f"--init {(models / 'Qwen2.5-7B-Instruct').resolve()} " in next(
        line for line in trains if "models/ar_sft_5ep " in line
    )


def test_the_learning_curve_schedules_its_chain_the_distillation_and_its_evaluations_only():
    """`snakemake curve` on the SmolLM2 curve overlay (docs/smollm2_curve.md): the chain x1 -> x2 -> x4 -> x8, the AR
    continuation and the self-distilled arm (after its distillation of AR SFT's answers), each MARS model at tau 1.0
    and 0.95 and decoded losslessly; nothing of the base config's own tables."""
    configs = (str(ROOT / "configs" / "smollm2-135m.yaml"), str(ROOT / "configs" / "smollm2-curve.yaml"))
    code, out, jobs = dry_run("curve", "--configfile", *configs)
    assert code == 0, out
    assert jobs["train"] == 7 and jobs["distill"] == 1  # AR SFT + the 6 entries of the overlay
    assert jobs["evaluate"] == 2 + 5 * 2 and jobs["evaluate_sweep"] == 5
    assert jobs["curve_table"] == 1 and jobs["figure_curve"] == 1
    assert "bench" not in jobs and "table" not in jobs and "speculate" not in jobs
    stdout = printed_commands(*map(Path, configs))
    trains = {
        re.search(r"--output (\S+)", line).group(1).split("/")[-1]: line
        for line in stdout.splitlines()
        if " train --job " in line
    }
    # the chain's entries read their parent (beside their own output), the distilled arm its own data folder
    assert '"resume_from":"mars_x1"' in trains["mars_x2"] and '"stop_at_step":400' in trains["mars_x2"]
    assert '"resume_from"' not in trains["mars_x1"] and '"stop_at_step"' not in trains["ar_sft"]
    assert re.search(r"--data \S*distilled/ar_sft/train_x8 ", trains["mars_self_x2"])
    assert re.search(r"--data \S*world/data ", trains["mars_x2"])
    assert re.search(r"mars distill --job '[^']*\"split\":\"train_x8\"[^']*' --model \S*models/ar_sft ", stdout)


@pytest.mark.parametrize(
    "models,curve,message",
    [
        (
            {"b": {"method": "mars", "init": "ar_sft_5ep", "block_size": 4, "w_ar": 1.0, "resume_from": "mars_b4"}},
            None,
            "'mars_b4' has no stop_at_step",
        ),
        (
            {
                "a": {"method": "mars", "init": "ar_sft_5ep", "block_size": 4, "w_ar": 1.0, "stop_at_step": 2},
                "b": {"method": "mars", "init": "base", "block_size": 4, "w_ar": 1.0, "resume_from": "a"},
            },
            None,
            "'a' has another init",
        ),
        (
            {
                "a": {"method": "mars", "init": "ar_sft_5ep", "block_size": 4, "max_steps": 8, "stop_at_step": 2},
                "b": {"method": "mars", "init": "ar_sft_5ep", "block_size": 4, "max_steps": 9, "resume_from": "a"},
            },
            None,
            "'a' has another max_steps (8, not 9)",
        ),
        (
            {"a": {"method": "mars", "init": "ar_sft_5ep", "block_size": 4, "max_steps": 8, "stop_at_step": 8}},
            None,
            "'models.a.stop_at_step': 8, but its schedule ends at step 8 (max_steps)",
        ),
        (
            {"s": {"method": "mars", "init": "world", "block_size": 4, "w_ar": 1.0, "targets": "self_greedy"}},
            None,
            "needs an init model that answers",
        ),
        ({}, {"models": ["ar_sft_5ep"], "start": "ar_sft_5ep"}, "'curve.models[0]': 'ar_sft_5ep' is a 'ar' model"),
        (
            {},
            {"models": ["mars_b4"], "start": "ar_sft_5ep", "self_distilled": ["mars_b8"]},
            "does not train on targets",
        ),
    ],
)
def test_bad_chains_and_curves_are_one_line_naming_the_key(tmp_path, models, curve, message):
    path = bad_config(tmp_path, lambda c: (c["models"].update(models), c.update(curve=curve) if curve else None))
    code, out, jobs = dry_run("--configfile", str(path))
    lines = [line for line in out.splitlines() if line.strip()]
    assert code != 0 and len(lines) == 1 and message in lines[0], out[-2000:]
    assert not jobs


def test_the_workflow_reads_its_config_without_loading_torch():
    """Every Snakemake run (and each cluster job's) parses the Snakefile; the modules it imports at its top level
    stay free of torch and transformers, which would add seconds to each (measured: a dry run 6.5 s with them, 3.4 s
    without). Imports inside a rule's run: block load only when that rule runs."""
    sources = [ROOT / "Snakefile", *sorted((ROOT / "workflow").rglob("*.smk"))]
    imports = sorted(
        {line for path in sources for line in path.read_text().splitlines() if re.match(r"(from|import) mars\b", line)}
    )
    assert len(imports) >= 4, imports  # (the pattern still finds the workflow's imports)
    code = "\n".join([*imports, "import sys", "print(sorted({'torch', 'transformers'} & set(sys.modules)))"])
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", proc.stdout
