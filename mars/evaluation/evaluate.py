"""``mars eval``: benchmark a checkpoint with lm-evaluation-harness through the ``mars`` model (MARS decoding).

    mars eval --model CKPT --tasks tiny_gsm8k[,tiny_bbh,...|tiny] --profile tiny --data WORLD/data \\
              --tau 0.95 [--block-size B] --cache cursor --metric probability --method mars \\
              --limit N --batch-size 16 --max-gen-toks 256 --output results/eval/ar/tiny_gsm8k/tau0.95.json \\
              [--experiment NAME] [--results-dir results] [--tag k=v ...] [--device cpu]
    mars eval --job '{"tasks": ..., "tau": ..., ...}' --model CKPT --data ... --output ...   (the pipeline's way)

``--model`` is a checkpoint folder or a hub id (the paper's "Base" row: ``Qwen/Qwen2.5-0.5B-Instruct``, loaded by
``from_pretrained``, from the local hub cache when offline; evaluated in AR mode; ``--mask-token`` names a
vocabulary token to use as [MASK] if it were decoded otherwise).  ``--profile paper --harness-data DIR`` runs the
harness's own tasks on a local mirror of their data sets (:mod:`mars.evaluation.tasks.mirror`).  The model runs on CUDA
when available (``--device``) in ``--dtype`` (auto: bf16 on CUDA, fp32 on the CPU).

A flag left out takes the config schema's ``eval`` default; the window B defaults to the block size the checkpoint
was trained with (``run_config.json``), so a B=16 model is decoded with 15 masks unless B is given explicitly.

The ``lm_eval`` CLI cannot import plug-in models, hence this command: it builds one :class:`MARSLM` and calls
``lm_eval.simple_evaluate(model=<it>, tasks=[task], task_manager=TaskManager(include_path=<generated tiny task
dir>), apply_chat_template=True, fewshot_as_multiturn=True, log_samples=True, gen_kwargs={"max_gen_toks": N})``
once PER TASK, so that the decoding statistics (tokens per forward, wall time) of a result belong to that task
alone.

Output: ONE JSON file per (model, tau, task).  With one task, ``--output`` is that file; with several, ``--output``
may contain ``{task}`` (replaced by the task name) or ``{family}`` (its family: ``gsm8k``), otherwise the files are
``<stem>.<task>.json`` next to it.  Each
file is written atomically (temporary file, fsync, rename) after its task finished: a failure leaves no partial
file. A run stopped part way resumes: each finished task's record is also kept in ``.mars_eval_done/`` beside its
file (with a key of the checkpoint's and the data's files, the ``mars`` package's evaluation code, the torch,
transformers and harness versions and every decoding and evaluation setting), and a rerun of the same job
(Snakemake removes the files of an incomplete job first; by hand, with ``--overwrite``) restores those tasks instead
of running them again. The folder goes when the job finishes.
``--tasks tiny`` (or ``paper``) means the profile's six tasks.  ``--limit N`` takes the first N documents of every
harness task (for ``tiny_bbh``: of each subtask).

Result schema: :mod:`mars.evaluation.record` (one JSON per result, ``schema_version`` 1).

MLflow: one run per result file, in the same store as training (``MLFLOW_TRACKING_URI`` or
``<results-dir>/mlflow.db``), experiment ``--experiment`` (default: the checkpoint's training experiment from
``<CKPT>/run_config.json``, else "mars-eval"); tags kind=eval, task, family, profile, tau, method, model_path,
model_name, output, trained_run_id (``run_config.json`` key ``mlflow_run_id``) and the ``--tag`` pairs; params the
model and eval args; metrics the metric values (names sanitised for MLflow: ``pass@1`` -> ``pass_1``) and the
decoding statistics.

Bad input (missing checkpoint, unknown task, tau outside (0, 1], missing data folder, ...) raises
:class:`mars.pipeline.config.ConfigError` before anything runs (the CLI prints one ``error:`` line, exit status 2).
Without a mirror the paper profile reads the hub: a data set that cannot be fetched is reported the same way (its MLflow
run is marked FAILED); with a mirror, its missing files are named before anything runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from mars.evaluation.record import build_record, mlflow_metrics
from mars.fileio import file_stats, write_json_atomic
from mars.pipeline.config import ConfigError

DEFAULT_EXPERIMENT = "mars-eval"


# ----------------------------------------------------------------------------------------------------------------
# command line


EVAL_SETTINGS = (
    "tasks",
    "profile",
    "method",
    "tau",
    "metric",
    "block_size",
    "cache",
    "cache_block_size",
    "limit",
    "batch_size",
    "max_gen_toks",
    "experiment",
    "harness_data",
    "dtype",
    "mask_token",
    "until",
    "kernels",
)


def add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    """Every decoding and evaluation flag defaults to the config schema's ``eval`` defaults, and the block size to
    the checkpoint's trained one; ``--job`` (the workflow's) gives them all at once as JSON."""
    parser.add_argument(
        "--model",
        required=True,
        help="checkpoint folder (save_pretrained, with its tokenizer), or a hub id (AR evaluation of a hub model)",
    )
    parser.add_argument("--job", default=None, help="JSON object of the settings below (the pipeline's job param)")
    parser.add_argument(
        "--tasks",
        default=None,
        help="comma-separated task names (tiny_gsm8k,...), family names (gsm8k) or the group (tiny / paper)",
    )
    parser.add_argument(
        "--profile",
        default=None,
        choices=("tiny", "paper"),
        help="tiny: the tiny world's tasks over --data; paper: the real lm-eval tasks",
    )
    parser.add_argument("--data", default=None, help="the world's data folder (test.jsonl, train.jsonl); tiny only")
    parser.add_argument("--tau", type=float, default=None, help="acceptance threshold in (0, 1]; 1.0 = AR mode")
    parser.add_argument("--block-size", type=int, default=None, help="window B (default: the trained one)")
    parser.add_argument("--cache", default=None, help="none | cursor | block")
    parser.add_argument("--cache-block-size", type=int, default=None)
    parser.add_argument("--metric", default=None, help="probability | entropy | margin")
    parser.add_argument(
        "--method", default=None, help="mars | mars_lossless | ar | jacobi | block_diffusion (default: mars)"
    )
    parser.add_argument("--limit", type=int, default=None, help="first N documents of each harness task")
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--max-gen-toks", type=int, default=None)
    parser.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    parser.add_argument("--dtype", default=None, help="auto (bf16 on CUDA, fp32 on CPU) | bfloat16 | float16 | float32")
    parser.add_argument(
        "--harness-data",
        default=None,
        help="paper profile: local mirror of the harness's data sets (mars.evaluation.tasks.mirror); default: the hub",
    )
    parser.add_argument("--mask-token", default=None, help="token used as [MASK] when the tokenizer has none")
    parser.add_argument(
        "--until",
        action="append",
        default=None,
        metavar="TEXT",
        help="replace every generation task's stop sequences by TEXT (repeat for several; '' for none: EOS and "
        "--max-gen-toks end an answer), e.g. --until '```' to read HumanEval's answers up to their closing fence",
    )
    parser.add_argument(
        "--kernels",
        default=None,
        choices=("native", "reproducible"),
        help="CPU kernels: chosen per CPU (native, the default) or pinned alike on every x86-64 CPU (mars/repro.py)",
    )
    parser.add_argument(
        "--output", required=True, help="result JSON (see 'mars.evaluation.evaluate' for several tasks)"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace existing result files")
    parser.add_argument("--experiment", default=None, help="MLflow experiment (default: the training one)")
    parser.add_argument("--results-dir", default=None, help="folder of the MLflow store (mlflow.db)")
    parser.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE", help="extra MLflow tag")


def eval_settings(args: argparse.Namespace) -> dict:
    """The settings of one run: explicit flags over the --job JSON; what neither gives, evaluate() takes from the
    config schema's defaults."""
    from mars.pipeline.jobs import parse_job

    settings = parse_job(args.job, allowed=EVAL_SETTINGS) if args.job else {}
    settings.update({key: getattr(args, key) for key in EVAL_SETTINGS if getattr(args, key, None) is not None})
    if not settings.get("tasks"):
        raise ConfigError("--tasks is required (or given by --job)")
    return settings


def run_eval_command(args: argparse.Namespace) -> None:
    from mars.pipeline.config import DEFAULT_RESULTS_DIR

    written = evaluate(
        model=args.model,
        data=args.data,
        output=args.output,
        results_dir=args.results_dir or DEFAULT_RESULTS_DIR,
        tags=parse_tags(args.tag),
        device=args.device,
        overwrite=args.overwrite,
        **eval_settings(args),
    )
    print(
        json.dumps(
            [
                {
                    "task": r["task"],
                    "output": str(p),
                    "primary_metric": r["primary_metric"],
                    "value": r["metrics"].get(r["primary_metric"], {}).get("value"),
                    "tokens_per_forward": r["decoding"]["tokens_per_forward"],
                }
                for p, r in written
            ],
            indent=2,
        )
    )


def parse_tags(pairs: list[str] | None) -> dict[str, str]:
    pairs = pairs or []
    bad = [p for p in pairs if "=" not in p or not p.split("=", 1)[0]]
    if bad:
        raise ConfigError(f"--tag needs KEY=VALUE, got {bad[0]!r}")
    return dict(p.split("=", 1) for p in pairs)


# ----------------------------------------------------------------------------------------------------------------
# input checks


def _read_run_config(path: Path) -> dict:
    try:
        return json.loads((path / "run_config.json").read_text())
    except (OSError, ValueError):
        return {}


def _positive(name: str, value, allow_none: bool = False) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def output_paths(output: str | os.PathLike, tasks: list[str], overwrite: bool = False) -> dict[str, Path]:
    text = str(output)
    if not text.endswith(".json"):
        raise ConfigError(f"--output must be a .json file, got {text!r}")
    if "{task}" in text or "{family}" in text:
        from mars.evaluation.tasks import family_of

        paths = {t: Path(text.replace("{task}", t).replace("{family}", family_of(t) or t)) for t in tasks}
    elif len(tasks) == 1:
        paths = {tasks[0]: Path(text)}
    else:
        base = Path(text)
        paths = {t: base.with_name(f"{base.stem}.{t}.json") for t in tasks}
    for p in paths.values():
        if p.exists() and p.is_dir():
            raise ConfigError(f"--output is a folder: {p}")
        if p.exists() and not overwrite:
            raise ConfigError(
                f"--output exists: {p} (give --overwrite to replace it; a run stopped part way then resumes)"
            )
    return {t: p.expanduser().resolve() for t, p in paths.items()}


DONE_DIR = ".mars_eval_done"  # finished tasks of a job stopped part way, beside their output files


def _resume_key(model_path: Path, task: str, settings: dict) -> str:
    """What a finished task's record was computed from: the checkpoint's files (names, sizes, modification times:
    weights, config, tokenizer and chat template), the data's files (in ``settings``), the code (the ``mars``
    package's evaluation code and the torch, transformers and harness versions: a commit that changes only docs,
    tests or tables keeps the finished tasks) and every setting."""
    from mars.pipeline.tracking import config_hash, source_digest

    code = {"source": source_digest()}
    return config_hash({"model": str(model_path), "files": file_stats(model_path), "task": task, **code, **settings})


def _finished_record(path: Path, key: str) -> dict | None:
    done = path.parent / DONE_DIR / path.name
    try:
        kept = json.loads(done.read_text())
        return kept["record"] if kept["key"] == key else None
    except (OSError, ValueError, KeyError, TypeError):  # (none, unreadable, or not a kept record)
        return None


# ----------------------------------------------------------------------------------------------------------------
# the evaluation


class _DropCustomDatasetNotice:
    """Drops lm-eval's per-task "Custom kwargs can be passed to --metadata" notice (custom_dataset tasks)."""

    def filter(self, record) -> bool:
        return "Custom kwargs can be passed" not in record.getMessage()


def _quiet_harness_notices() -> None:
    import logging

    task_logger = logging.getLogger("lm_eval.api.task")
    if not any(isinstance(f, _DropCustomDatasetNotice) for f in task_logger.filters):
        task_logger.addFilter(_DropCustomDatasetNotice())


def evaluate(
    *,
    model: str | os.PathLike,
    tasks: str | list[str],
    profile: str | None = None,
    data: str | os.PathLike | None = None,
    tau: float = 1.0,
    block_size: int | None = None,
    cache: str | None = None,
    cache_block_size: int | None = None,
    metric: str | None = None,
    method: str = "mars",
    limit: int | None = None,
    batch_size: int | None = None,
    max_gen_toks: int | None = None,
    output: str | os.PathLike,
    experiment: str | None = None,
    results_dir: str | os.PathLike | None = None,
    tags: dict[str, str] | None = None,
    device: str | None = None,
    dtype: str | None = None,
    harness_data: str | os.PathLike | None = None,
    mask_token: str | None = None,
    until: list[str] | None = None,
    kernels: str | None = None,
    bootstrap_iters: int = 1000,
    overwrite: bool = False,
) -> list[tuple[Path, dict]]:
    """Evaluate ``model`` on ``tasks``; writes one JSON per task and returns [(path, record)] (module docstring).

    A setting left None takes the config schema's ``eval`` default; the block size of a MARS or block-diffusion
    decode defaults to the checkpoint's trained one (Jacobi: ``eval.jacobi_block_size``). ``until`` replaces the
    tasks' own stop sequences (``[""]``: none; recorded with the result); ``kernels`` selects the CPU kernels
    (``training.kernels``' modes, mars/repro.py): a reproducible model is decoded with the kernels it was trained
    with, so near-ties break alike on every machine."""
    from mars.checkpoints import _load_errors, check_checkpoint, checkpoint_error, trained_block_size
    from mars.decoding.generation import decoding_window, resolve_dtype
    from mars.decoding.settings import decoding_settings
    from mars.evaluation.tasks import (
        PAPER_FEWSHOT,
        PAPER_PRIMARY_METRIC,
        PAPER_TASKS,
        PRIMARY_METRIC,
        paper_task_manager,
        paper_task_spec,
        resolve_tasks,
        write_task_dir,
    )
    from mars.evaluation.tasks import mirror as harness_mirror
    from mars.fileio import check_writable
    from mars.pipeline.config import DEFAULT_RESULTS_DIR, schema_defaults
    from mars.pipeline.tracking import source_digest
    from mars.repro import KERNEL_MODES, apply_kernel_mode, machine_facts

    source_digest()  # the resume key's code: the files this process runs, read before anything else loads
    kernels = kernels or "native"
    if kernels not in KERNEL_MODES:
        raise ConfigError(f"--kernels must be one of {', '.join(KERNEL_MODES)}, got {kernels!r}")
    apply_kernel_mode(kernels)  # (before any kernel runs: the variables are read then)
    if until is not None:
        until = [until] if isinstance(until, str) else list(until)
        if not all(isinstance(u, str) for u in until):
            raise ConfigError(f"--until takes text, got {until!r}")
        until = [u for u in until if u]  # ('' alone: no stop sequence)
    # ---- every input check first: nothing runs, nothing is written on bad input
    model_path = check_checkpoint(model, "--model")
    defaults = schema_defaults("eval")
    given = dict(
        profile=profile,
        dtype=dtype,
        harness_data=harness_data,
        cache=cache,
        cache_block_size=cache_block_size,
        metric=metric,
        batch_size=batch_size,
        max_gen_toks=max_gen_toks,
    )
    given = {k: defaults[k] if v is None else v for k, v in given.items()}  # (0 stays 0: checked below)
    profile, cache, cache_block_size, metric = (
        given["profile"],
        given["cache"],
        given["cache_block_size"],
        given["metric"],
    )
    batch_size, max_gen_toks = given["batch_size"], given["max_gen_toks"]
    dtype, harness_data = given["dtype"], given["harness_data"]
    results_dir = results_dir or DEFAULT_RESULTS_DIR
    trained_block = trained_block_size(model_path)
    explicit = block_size is not None
    block_size = decoding_window(model_path, method, 1.0 if tau is None else tau, block_size)
    windowed = method in ("mars", "mars_lossless", "block_diffusion")
    if explicit and windowed and trained_block and block_size != trained_block:
        print(
            f"[mars eval] decoding with an explicit window of {block_size}; {model_path.name} was trained with "
            f"block size {trained_block}",
            file=sys.stderr,
        )
    names = tasks.split(",") if isinstance(tasks, str) else list(tasks)
    selected = resolve_tasks(names, profile)
    try:
        decoding_args = decoding_settings(
            tau=tau, block_size=block_size, cache=cache, cache_block_size=cache_block_size, metric=metric, method=method
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    limit = _positive("--limit", limit, allow_none=True)
    resolve_dtype(dtype, device)  # (a bad name fails here, before anything runs)
    if profile == "paper":
        harness_data = harness_mirror.check_harness_data(harness_data)
        if any(family == "ifeval" for _, family in selected) and not harness_mirror.nltk_data_ready(harness_data):
            if harness_data is not None:
                raise ConfigError(
                    f"ifeval needs nltk's punkt_tab: none in {harness_mirror.nltk_data_dir(harness_data)} nor on "
                    "NLTK_DATA (see mars.evaluation.tasks.mirror)"
                )
            print(
                "[mars eval] nltk's punkt_tab is missing: the harness's ifeval will try to download it", file=sys.stderr
            )
    elif harness_data is not None:
        print("[mars eval] harness_data is ignored by profile 'tiny' (its tasks read --data)", file=sys.stderr)
        harness_data = None
    batch_size = _positive("--batch-size", batch_size)
    max_gen_toks = _positive("--max-gen-toks", max_gen_toks)
    paths = output_paths(output, [t for t, _ in selected], overwrite)
    for path in paths.values():
        check_writable(path)
    tags = dict(tags or {})
    run_config = _read_run_config(model_path)
    experiment = experiment or run_config.get("experiment") or DEFAULT_EXPERIMENT

    with tempfile.TemporaryDirectory(prefix="mars_eval_tasks_") as task_dir:
        data_dir = None
        if profile == "tiny":
            from mars.evaluation.tasks import check_data_dir

            data_dir = check_data_dir(data)
            written = write_task_dir(data_dir, task_dir, max_gen_toks=max_gen_toks)
            missing = [t for t, _ in selected if t not in written]
            if missing:
                raise ConfigError(f"task {missing[0]} has no test records in {data_dir}")
        elif data is not None:
            print(
                "[mars eval] --data is ignored by profile 'paper' (its tasks load their own data sets)", file=sys.stderr
            )

        from lm_eval import simple_evaluate
        from lm_eval.tasks import TaskManager

        from mars.evaluation.lm_eval_model import MARSLM

        _quiet_harness_notices()

        data_overrides: dict = {}
        if profile == "tiny":
            task_manager = TaskManager(include_path=task_dir, include_defaults=False)
        else:
            task_manager = paper_task_manager()
            if harness_data is not None:  # the harness's own tasks, their data read from the local mirror
                data_overrides = harness_mirror.write_redirected_tasks(
                    task_manager, [t for t, _ in selected], harness_data, task_dir, inline=(PAPER_TASKS["humaneval"],)
                )
                harness_mirror.quiet_override_notices()
                task_manager = paper_task_manager(include_path=task_dir)

        try:
            lm = MARSLM(
                pretrained=str(model_path),
                batch_size=batch_size,
                device=device,
                dtype=dtype,
                mask_token=mask_token,
                **decoding_args,
            )
        except _load_errors() as exc:
            raise ConfigError(checkpoint_error(model, exc)) from None

        from mars.pipeline.tracking import log_metrics, mlflow_run, tracking_uri

        # the data the tasks read, for the resume key (a folder or mirror rebuilt in place is other data)
        inputs = {
            "data_files": file_stats(data_dir, "*.jsonl") if data_dir else None,
            "harness_files": file_stats(harness_data, "**/*") if harness_data else None,
        }
        out: list[tuple[Path, dict]] = []
        for task, family in selected:
            spec = task if profile == "tiny" else paper_task_spec(family, task_manager, data_overrides)
            num_fewshot = None if profile == "tiny" else PAPER_FEWSHOT[family]
            eval_args = {
                "limit": limit,
                "batch_size": batch_size,
                "max_gen_toks": max_gen_toks,
                "apply_chat_template": True,
                "fewshot_as_multiturn": True,
                "num_fewshot": num_fewshot,
                "data_dir": str(data_dir) if data_dir else None,
                "harness_data": str(harness_data) if harness_data else None,
                "dtype": str(lm.model.dtype).removeprefix("torch."),
                "bootstrap_iters": bootstrap_iters,
                # (recorded where set: the published records' keys stay as they were)
                **({"until": until} if until is not None else {}),
                **({"kernels": kernels} if kernels != "native" else {}),
            }
            run_tags = {
                "kind": "eval",
                "task": task,
                "family": family,
                "profile": profile,
                "tau": str(decoding_args["tau"]),
                "method": decoding_args["method"],
                "model_path": str(model_path),
                "model_name": model_path.name,
                "output": str(paths[task]),
                **({"trained_run_id": run_config["mlflow_run_id"]} if run_config.get("mlflow_run_id") else {}),
                **tags,
            }
            params = {
                **{f"model.{k}": v for k, v in decoding_args.items()},
                **{f"eval.{k}": v for k, v in eval_args.items()},
            }
            run_name = f"eval/{model_path.name}/{task}/tau={decoding_args['tau']}"
            key = _resume_key(
                model_path, task, {"profile": profile, "mask_token": mask_token, "device": device, **inputs, **params}
            )
            record = _finished_record(paths[task], key)
            if record is not None:  # finished by this job before it was stopped (and logged to MLflow then)
                write_json_atomic(paths[task], record)
                print(
                    f"[mars eval] {task}: restored, finished before the job was stopped -> {paths[task]}",
                    file=sys.stderr,
                )
                out.append((paths[task], record))
                continue
            print(f"[mars eval] {task} ({profile}) tau={decoding_args['tau']} model={model_path}", file=sys.stderr)
            with mlflow_run(experiment, run_name, results_dir=results_dir, tags=run_tags, params=params) as mlflow:
                lm.reset_stats()
                start = time.perf_counter()
                try:
                    results = simple_evaluate(
                        model=lm,
                        tasks=[spec],
                        task_manager=task_manager,
                        num_fewshot=num_fewshot,
                        limit=limit,
                        apply_chat_template=True,
                        fewshot_as_multiturn=True,
                        log_samples=True,
                        gen_kwargs={"max_gen_toks": max_gen_toks, **({"until": until} if until is not None else {})},
                        bootstrap_iters=bootstrap_iters,
                        confirm_run_unsafe_code=True,
                    )  # model code runs only through mars.evaluation.sandbox (task metrics)
                except ConnectionError as exc:  # paper profile offline: the data sets live on the hub
                    raise ConfigError(
                        f"task {task} needs its data set from the hub: {str(exc).splitlines()[0]}"
                    ) from None
                elapsed = time.perf_counter() - start
                primary = PRIMARY_METRIC[family] if profile == "tiny" else PAPER_PRIMARY_METRIC[family]
                record = build_record(
                    results,
                    task=task,
                    family=family,
                    profile=profile,
                    lm=lm,
                    model_path=model_path,
                    run_config=run_config,
                    eval_args=eval_args,
                    eval_wall_time_s=elapsed,
                    primary_metric=primary,
                )
                record["machine"] = machine_facts(kernels)  # CPU, kernels in effect, threads, library versions
                active = mlflow.active_run()
                record["mlflow"] = {
                    "run_id": active.info.run_id if active else None,
                    "experiment": experiment,
                    "tracking_uri": tracking_uri(results_dir),
                }
                log_metrics(mlflow_metrics(record))
                write_json_atomic(paths[task], record)
            # kept for a rerun only once its MLflow run has ended well
            write_json_atomic(paths[task].parent / DONE_DIR / paths[task].name, {"key": key, "record": record})
            value = record["metrics"].get(primary, {}).get("value")
            print(
                f"[mars eval] {task}: {primary}={value} tokens/forward="
                f"{record['decoding']['tokens_per_forward']:.3f} -> {paths[task]}",
                file=sys.stderr,
            )
            out.append((paths[task], record))
        for path in paths.values():  # the job finished: nothing left to resume
            (path.parent / DONE_DIR / path.name).unlink(missing_ok=True)
            with contextlib.suppress(OSError):  # (only when empty: other jobs' tasks may share the folder)
                (path.parent / DONE_DIR).rmdir()
        return out
