"""``mars train``: one model from one config entry -> a ``save_pretrained`` folder.

The folder holds safetensors weights, the tokenizer, ``run_config.json`` (the exact spec, paths and config hash) and
``metrics.json`` (final losses, optimizer steps, wall time).  It appears only when training has finished: work
happens in ``<output>.work/`` (Trainer checkpoints, so a killed run resumes where it stopped) and the finished
folder is renamed into place.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from transformers.trainer_callback import ExportableState
from trl import SFTConfig

from mars.fileio import file_stats, write_json_atomic
from mars.pipeline.config import ConfigError, TrainSpec, check_spec, resolve_grad_accum
from mars.pipeline.tracking import config_hash, log_metrics, mlflow_run
from mars.repro import apply_kernel_mode, kernel_mode_callback, machine_facts
from mars.training.data import build_dataset, eval_datasets, load_records
from mars.training.trainer import ARTrainer, MARSConfig, MARSTrainer


class MLflowLossCallback(TrainerCallback):
    """Logs every Trainer log line (loss, loss_mask, loss_ar, learning rate...) to the active MLflow run."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and state.is_world_process_zero:
            log_metrics(logs, step=state.global_step)


class AbortAfterStep(TrainerCallback):
    """Test hook: stop the process as a kill would, right after the checkpoint of ``step`` was written."""

    def __init__(self, step: int):
        self.step = step

    def on_save(self, args, state, control, **kwargs):
        if state.global_step >= self.step:
            raise KeyboardInterrupt(f"aborted after step {state.global_step}")


class RunTotals(TrainerCallback, ExportableState):
    """The run's training-loss sum and times over all its invocations, so that a resumed run records what an
    uninterrupted one does (metrics.json's ``train_loss``, ``train_runtime_s``, ``wall_time_s``, and the cost table,
    which adds ``wall_time_s_before_resume`` to the last invocation's Snakemake time). Every checkpoint keeps them in
    its ``trainer_state.json`` (the Trainer saves an ExportableState callback's :meth:`state` there, in the same
    write as the step it belongs to); a resume reads them back from the checkpoint it starts from. An invocation's
    time counts up to its last checkpoint: the work after it is redone, and counted, by the next one.

    The logging window travels too: what the Trainer, TRL and the MARS trainer have summed since the last log (the
    loss, the entropy and accuracy lists, the MARS part sums, the token count) and the step of that log. Restored at
    the resume, the first log after it averages the same steps as an uninterrupted run's, so the whole log history
    (``run_config.json``, MLflow) is the uninterrupted run's, but for the times and the Trainer's closing summary
    of each invocation. In one process only: with several, each holds its own window and the checkpoint only the
    main one's."""

    def __init__(self, started: float = 0.0, checkpoint: str | None = None):
        self.started = started  # this invocation's start (time.time())
        self.train_started = None  # its training loop's start
        self.trainer = None  # set once the trainer exists (the running loss lives there)
        self.before = {"loss_sum": 0.0, "train_runtime_s": 0.0, "wall_time_s": 0.0}
        state = json.loads((Path(checkpoint) / "trainer_state.json").read_text()) if checkpoint else {}
        saved = (state.get("stateful_callbacks") or {}).get(type(self).__name__) or {}
        attributes = saved.get("attributes") or {}
        self.before.update({k: float(v) for k, v in attributes.items() if k in self.before})
        # the logging window at the checkpoint (None: none, or a checkpoint from before it was kept, whose
        # loss_sum holds the window's loss)
        self.window = attributes.get("window")

    def on_train_begin(self, args, state, control, **kwargs):
        self.train_started = time.time()
        state.stateful_callbacks.setdefault(type(self).__name__, {})  # (a checkpoint from before this record)
        trainer, window = self.trainer, self.window
        if window is None or trainer is None:
            return
        if trainer.accelerator.num_processes > 1:
            # each process sums its own window and only the main one's is saved: counted in the run's loss sum as
            # before the window was kept, and not restored (the first log after the resume averages fewer steps)
            self.before["loss_sum"] += window["loss"]
            return
        # (the Trainer set its own window to empty at this step just before this call)
        trainer._tr_loss = torch.tensor(window["loss"], dtype=trainer._tr_loss.dtype, device=trainer._tr_loss.device)
        trainer._globalstep_last_logged = int(window["last_logged_step"])
        if hasattr(trainer, "_total_train_tokens"):  # TRL's: its logged num_tokens count the whole run
            trainer._total_train_tokens = window["train_tokens"]
            trainer._metrics["train"] = defaultdict(list, {k: list(v) for k, v in window["metrics"].items()})
        if window.get("part_sums") is not None:  # the MARS trainer's loss parts
            trainer._part_sums["train"] = torch.tensor(window["part_sums"], dtype=torch.float64)

    def state(self) -> dict:
        """The totals up to now (the loss the Trainer summed over the logged steps) and the logging window."""
        now, trainer = time.time(), self.trainer
        totals = {
            "loss_sum": self.before["loss_sum"]
            + (getattr(trainer, "_total_loss_scalar", 0.0) if self.train_started else 0.0),
            "train_runtime_s": self.before["train_runtime_s"] + (now - (self.train_started or now)),
            "wall_time_s": self.before["wall_time_s"] + (now - self.started),
        }
        if self.train_started:
            part_sums = getattr(trainer, "_part_sums", {}).get("train")
            totals["window"] = {
                "loss": float(trainer._tr_loss),
                "last_logged_step": trainer._globalstep_last_logged,
                "train_tokens": getattr(trainer, "_total_train_tokens", 0),
                "metrics": {k: list(v) for k, v in getattr(trainer, "_metrics", {}).get("train", {}).items()},
                "part_sums": part_sums.tolist() if part_sums is not None else None,
            }
        return {"args": {}, "attributes": totals}


class StopAtStep(TrainerCallback):
    """``stop_at_step``: stop after that optimizer step of the schedule with a checkpoint of it (the schedule stays
    the one of the whole run: a learning curve's point, which the next entry of the chain resumes from)."""

    def __init__(self, step: int):
        self.step = step

    def on_train_begin(self, args, state, control, **kwargs):
        if self.step >= state.max_steps:
            raise ConfigError(f"stop_at_step: {self.step}, but the schedule ends at step {state.max_steps}")

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= self.step:
            control.should_save = True
            control.should_training_stop = True
        return control


TRAINER_CHECKPOINT = "trainer_checkpoint"  # in a stop_at_step model's folder: what resume_from goes on from
CHAIN_ONLY = ("stop_at_step", "resume_from")  # what a chain's entries may differ in


def chain_start(parent: str, spec: TrainSpec, init: str, data_dir: str, mask_token: str | None) -> Path:
    """The Trainer checkpoint a ``resume_from`` entry goes on from: the parent model folder's, after checking that
    the parent was trained with the same settings (but for :data:`CHAIN_ONLY`), start, data and mask token, and
    stopped before this entry's own stop. ConfigError (one line) otherwise."""
    parent_dir = Path(parent)
    checkpoint = parent_dir / TRAINER_CHECKPOINT
    record = parent_dir / "run_config.json"
    if not checkpoint.is_dir() or not record.is_file():
        raise ConfigError(
            f"--resume-from {parent}: no finished model with a {TRAINER_CHECKPOINT}/ (train it with stop_at_step)"
        )
    before = json.loads(record.read_text())
    ignored = (*CHAIN_ONLY, *LAUNCH_ONLY)
    mine = {k: v for k, v in spec.to_dict().items() if k not in ignored}
    theirs = {k: v for k, v in before["spec"].items() if k not in ignored}
    defaults = {f.name: f.default for f in dataclasses.fields(TrainSpec)}
    changed = sorted(k for k in {*mine, *theirs} if mine.get(k, defaults.get(k)) != theirs.get(k, defaults.get(k)))
    for name, mine_path, their_path in (("init", init, before["init"]), ("data_dir", data_dir, before["data_dir"])):
        if Path(mine_path).resolve() != Path(their_path).resolve():
            changed.append(name)
    if (before.get("mask_token") or None) != (mask_token or None):
        changed.append("mask_token")
    if changed:
        raise ConfigError(f"--resume-from {parent}: trained with other settings (changed: {', '.join(changed)})")
    parent_step = int(before["spec"]["stop_at_step"])
    if spec.stop_at_step is not None and spec.stop_at_step <= parent_step:
        raise ConfigError(f"stop_at_step: {spec.stop_at_step}, but --resume-from {parent} stopped at {parent_step}")
    return checkpoint


def load_init(init: str, spec: TrainSpec, mask_token: str | None = None):
    """Model and tokenizer of the starting checkpoint, with the checks a bad checkpoint must fail.

    ``mask_token`` names an EXISTING token to use as [MASK] when the tokenizer has none (Qwen2.5: a reserved
    token), so the model gains no parameters.
    """
    from mars.checkpoints import _load_errors, check_checkpoint, checkpoint_error

    init = str(check_checkpoint(init, "--init"))  # a missing local folder fails here, with no hub lookup
    try:
        tokenizer = AutoTokenizer.from_pretrained(init)
    except _load_errors() as exc:
        raise ConfigError(checkpoint_error(init, exc)) from None
    if mask_token and tokenizer.mask_token_id is None:
        if mask_token not in tokenizer.get_vocab():
            raise ConfigError(f"mask token {mask_token!r} is not in the vocabulary of {init}")
        tokenizer.mask_token = mask_token
    if spec.method in ("mars", "block_diffusion") and tokenizer.mask_token_id is None:
        raise ConfigError(f"tokenizer of {init} has no mask token; method {spec.method} needs one")
    if tokenizer.pad_token_id is None:
        raise ConfigError(f"tokenizer of {init} has no pad token")
    try:
        if spec.architecture:
            model = fresh_model(init, spec.architecture, spec.seed)
        else:
            model = AutoModelForCausalLM.from_pretrained(init, dtype=torch.float32)
    except _load_errors() as exc:  # (a truncated safetensors file included)
        raise ConfigError(checkpoint_error(init, exc)) from None
    if spec.layers is not None:
        keep_first_layers(model, spec.layers, init)
    return model, tokenizer


def keep_first_layers(model, n: int, init: str = "the model") -> None:
    """Cut ``model`` (in place) to its first ``n`` decoder layers; embeddings, final norm and output layer stay.

    A model entry's ``layers``: a smaller draft of the same family and tokenizer that starts from trained weights
    (Table 6 on a real model, which ships no smaller sibling offline). The config's per-layer lists are cut too, so
    the saved folder loads as an ordinary ``n``-layer checkpoint."""
    layers = model.get_decoder().layers
    if not 1 <= n < len(layers):
        raise ConfigError(f"layers: {n}, but {init} has {len(layers)} decoder layers (keep 1 to {len(layers) - 1})")
    model.get_decoder().layers = torch.nn.ModuleList(list(layers)[:n])
    model.config.num_hidden_layers = n
    if getattr(model.config, "layer_types", None):
        model.config.layer_types = model.config.layer_types[:n]


def fresh_model(init: str, architecture: dict, seed: int):
    """A new randomly initialised model (seeded by ``seed``) of the init checkpoint's configuration with the
    ``architecture`` keys changed (a model entry's ``architecture``: the smaller draft of Table 6); the init's
    weights are not read. Per-layer lists derived from the layer count (``layer_types``) and the head size are
    re-derived for the new shape."""
    from transformers import AutoConfig

    base = AutoConfig.from_pretrained(init)
    fields = base.to_dict()
    for derived in ("layer_types", "head_dim"):
        fields.pop(derived, None)
    fields.update(architecture)
    config = type(base)(**fields)
    if config.hidden_size % config.num_attention_heads or config.num_attention_heads % config.num_key_value_heads:
        raise ConfigError(
            f"architecture {architecture}: hidden_size must be divisible by num_attention_heads, and "
            "num_key_value_heads must divide num_attention_heads"
        )
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32)


def sft_config(spec: TrainSpec, work_dir: Path, grad_accum: int, evaluate: bool = False) -> SFTConfig:
    """The trainer's arguments of one model entry: a MARSConfig (TRL's SFTConfig plus the MARS fields) for the
    dual-stream methods, TRL's SFTConfig for AR SFT and the plain-LM base."""
    mars_fields = (
        dict(
            block_size=spec.block_size,
            w_ar=spec.w_ar,
            variant=spec.variant,
            loss_normalization=spec.loss_normalization,
            pad_to_block=spec.pad_to_block,
            mask_loss_weighting=spec.mask_loss_weighting,
            loss_turns=spec.loss_turns,
        )
        if spec.method in ("mars", "block_diffusion")
        else {}
    )
    return (MARSConfig if mars_fields else SFTConfig)(
        **mars_fields,
        output_dir=str(work_dir),
        num_train_epochs=spec.epochs,
        max_steps=spec.max_steps,
        per_device_train_batch_size=spec.batch_size,
        gradient_accumulation_steps=grad_accum,
        learning_rate=spec.learning_rate,
        lr_scheduler_type=spec.lr_scheduler,
        warmup_steps=spec.warmup_ratio,  # a float < 1 is a ratio of the total steps
        weight_decay=spec.weight_decay,
        max_length=spec.max_length,
        bf16=spec.bf16,
        activation_checkpointing=spec.activation_checkpointing,  # TRL's default is on; set explicitly
        packing=False,
        padding_free=False,
        completion_only_loss=spec.method != "lm",
        seed=spec.seed,
        data_seed=spec.seed,
        save_strategy="steps",
        save_steps=spec.save_steps,
        save_total_limit=1,
        logging_steps=spec.logging_steps,
        eval_strategy="steps" if evaluate else "no",
        eval_steps=spec.eval_steps if evaluate else None,
        per_device_eval_batch_size=spec.batch_size,
        prediction_loss_only=True,
        report_to="none",
        disable_tqdm=False,
        dataloader_num_workers=0,
        use_cpu=not torch.cuda.is_available(),
        dataset_num_proc=None,
    )


def processes() -> int:
    """Data-parallel copies of the model in this run, each taking ``batch_size`` examples per micro-batch: the
    processes of a distributed launch (WORLD_SIZE, set by ``accelerate launch`` and torchrun), else the GPUs over which
    the Trainer's DataParallel splits one process's batch (one on CPU or a single GPU)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        return world
    return max(torch.cuda.device_count(), 1) if torch.cuda.is_available() else 1


def is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def make_trainer(spec: TrainSpec, model, tokenizer, dataset: Dataset, work_dir: Path, callbacks=(), eval_dataset=None):
    count = processes()
    grad_accum = resolve_grad_accum(spec, count)
    args = sft_config(spec, work_dir, grad_accum, evaluate=eval_dataset is not None)
    common = dict(
        model=model,
        args=args,
        train_dataset=dataset,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        callbacks=list(callbacks),
        sort_micro_batches=spec.sort_micro_batches,
    )
    if spec.method in ("lm", "ar"):
        trainer = ARTrainer(**common)
    else:
        trainer = MARSTrainer(**common, mask_token_id=tokenizer.mask_token_id)
    per_step = trainer.args.train_batch_size * trainer.args.gradient_accumulation_steps * trainer.args.world_size
    if per_step != spec.batch_size * grad_accum * count:  # the Trainer saw another number of processes than we did
        raise RuntimeError(
            f"the Trainer's batch per optimizer step is {per_step}, expected {spec.batch_size * grad_accum * count}"
        )
    return trainer


def last_complete_checkpoint(work_dir: Path) -> str | None:
    """The newest Trainer checkpoint in ``work_dir`` that was written to the end (its ``trainer_state.json``, the
    Trainer's last file, exists): a run killed while saving resumes from the one before."""
    steps = sorted(
        (int(p.name.split("-")[1]), p) for p in Path(work_dir).glob("checkpoint-*") if p.name.split("-")[1].isdigit()
    )
    complete = [p for _, p in steps if (p / "trainer_state.json").is_file()]
    return str(complete[-1]) if complete else None


# settings that change how a run is launched or logged, not what it computes: a resume may change them
LAUNCH_ONLY = (
    "threads",
    "accelerate_config",
    "processes",
    "save_steps",
    "logging_steps",
    "eval_steps",
    "activation_checkpointing",  # (recomputes the same activations: memory, not results)
)


def resume_settings(spec: TrainSpec, init: str, data_dir: str, mask_token: str | None) -> dict:
    """What a run's checkpoints were computed from: the settings, the start's files and the data's files (names,
    sizes, modification times: a start retrained in place is another start). A resume must have the same."""
    local = [str(Path(p).resolve()) if Path(p).exists() else p for p in (init, data_dir)]
    computed = {k: v for k, v in spec.to_dict().items() if k not in LAUNCH_ONLY}
    return {
        "spec": computed,
        "init": local[0],
        "init_files": file_stats(init) if Path(init).is_dir() else None,
        "data_dir": local[1],
        "data_files": file_stats(data_dir, "*.jsonl"),
        "mask_token": mask_token,
    }


def check_resumable(work_dir: Path, settings: dict, last: str | None, main: bool) -> None:
    """Resume only checkpoints of the same settings (``work_dir/settings.json``): a model entry or its start
    changed since a run was stopped would otherwise go on from weights and a schedule of the old ones. ConfigError
    (one line) when they differ; the folder is the user's to remove (a multi-process run cannot safely delete it
    here). A key added to the code later, absent from the record, counts as unchanged (at its default)."""
    record = work_dir / "settings.json"
    if last and record.is_file():
        before, now = json.loads(record.read_text()), json.loads(json.dumps(settings, default=str))
        defaults = {f.name: f.default for f in dataclasses.fields(TrainSpec)}
        changed = sorted(
            k
            for k in {*before["spec"], *now["spec"]}
            if before["spec"].get(k, defaults.get(k)) != now["spec"].get(k, defaults.get(k))
        ) + [
            k
            for k in ("init", "init_files", "data_dir", "data_files", "mask_token")
            if k in before and before[k] != now[k]
        ]
        if changed:
            raise ConfigError(
                f"{work_dir} holds checkpoints of other settings (changed: {', '.join(changed)}): remove it to "
                "start afresh, or run with the old settings to resume"
            )
    if main and not (last and record.is_file()):  # (a folder from before this record resumes as it always did)
        write_json_atomic(record, settings)


class Preempted(SystemExit):
    """The run was told to stop (SIGTERM, SIGUSR1, Ctrl-C's SIGINT) and saved a Trainer checkpoint: exit status
    128 + the signal, so that the job fails and a resubmitted one resumes from the checkpoint."""


class PreemptionCallback(TrainerCallback):
    """On SIGTERM or SIGUSR1 (SLURM sends one before the time limit with ``sbatch --signal``) or SIGINT (Ctrl-C),
    save a checkpoint at the end of the current optimizer step and stop. Further signals change nothing (under
    ``accelerate launch`` one Ctrl-C reaches each worker twice, from the terminal and from the launcher; a save must
    not be cut short); Ctrl-\\ (SIGQUIT) stops at once. With several processes the flag is agreed on by all of them
    at every step (a signal reaches them at slightly different times), so they save and stop together."""

    SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)

    def __init__(self):
        self.signum = 0
        self._previous = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():  # signal handlers live in the main thread only
            return
        for signum in self.SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)

    def uninstall(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def _handle(self, signum, frame) -> None:
        self.signum = self.signum or signum

    def on_step_end(self, args, state, control, **kwargs):
        signum = self.signum
        if args.world_size > 1:
            flag = torch.tensor([signum], device=args.device)
            torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
            signum = int(flag)
        if signum:
            self.signum = signum
            control.should_save = True
            control.should_training_stop = True
        return control


def _final_state_dict(trainer, bf16: bool) -> dict | None:
    """The full weights on the main process (None elsewhere); every process must call this (FSDP gathers shards).
    bf16 runs are saved in bf16, the precision they were trained and are evaluated in, like the Base checkpoint."""
    state_dict = trainer.accelerator.get_state_dict(trainer.model_wrapped)
    if state_dict is None or not trainer.accelerator.is_main_process:
        return None
    if bf16:
        state_dict = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in state_dict.items()}
    return state_dict


def train(
    spec: TrainSpec,
    *,
    init: str,
    data_dir: str,
    output: str,
    experiment: str = "default",
    run_name: str | None = None,
    results_dir: str = "results",
    tags: dict | None = None,
    mask_token: str | None = None,
    abort_after_step: int | None = None,
    resume_from: str | None = None,
) -> dict:
    """Train one model; returns the final metrics. Raises ConfigError on bad input before writing anything.

    Under a distributed launch (``accelerate launch``) every process runs this; only the main one logs to MLflow and
    writes the output folder.
    """
    check_spec(spec)
    apply_kernel_mode(spec.kernels)  # (before any kernel runs: the variables are read then)
    output_path = Path(output)
    if resume_from and not spec.resume_from:
        raise ConfigError("--resume-from is for an entry with resume_from (a chain of stop_at_step entries)")
    if spec.resume_from and not resume_from:  # the workflow's layout: the models are siblings, models/<name>
        resume_from = str(output_path.parent / spec.resume_from)
    if (output_path / "metrics.json").is_file():
        raise ConfigError(f"output folder already holds a finished model: {output}")
    if output_path.exists():
        raise ConfigError(f"output path exists and is not a finished model (remove it first): {output}")
    launched = os.environ.get("ACCELERATE_MIXED_PRECISION", "no")  # set by `accelerate launch` from its config
    if launched not in ("no", "bf16" if spec.bf16 else "no"):
        raise ConfigError(
            f"config key 'training.bf16': {spec.bf16}, but the accelerate config launched this run with "
            f"mixed_precision {launched!r}: make them agree"
        )
    count = processes()
    grad_accum = resolve_grad_accum(spec, count)
    effective_batch = spec.batch_size * grad_accum * count
    main = is_main_process()
    model, tokenizer = load_init(init, spec, mask_token)
    records = load_records(data_dir, spec.split)
    dataset = build_dataset(records, tokenizer, spec)
    dropped = len(records) - len(dataset)
    if dropped and main:
        print(
            f"mars train: dropped {dropped} of {len(records)} examples whose prompt is at least "
            f"max_length={spec.max_length} tokens long",
            file=sys.stderr,
        )
    evals = eval_datasets(data_dir, spec, tokenizer, records)
    if spec.threads:
        torch.set_num_threads(spec.threads)
    apply_kernel_mode(spec.kernels)  # again: setting the threads sets MKL's, which the reproducible mode keeps to one

    work_dir = output_path.with_name(output_path.name + ".work")
    work_dir.mkdir(parents=True, exist_ok=True)
    last = last_complete_checkpoint(work_dir)
    start_from = chain_start(resume_from, spec, init, data_dir, mask_token) if resume_from else None
    check_resumable(work_dir, resume_settings(spec, init, data_dir, mask_token), last, main)
    if start_from is not None and last is None and main:  # a chain's first invocation: go on from the parent's
        step = json.loads((start_from / "trainer_state.json").read_text())["global_step"]
        copying = work_dir / f"copying-checkpoint-{step}"
        shutil.rmtree(copying, ignore_errors=True)
        shutil.copytree(start_from, copying)
        os.replace(copying, work_dir / f"checkpoint-{step}")
        last = str(work_dir / f"checkpoint-{step}")
    run_file = work_dir / "mlflow_run_id"
    run_id = run_file.read_text().strip() if last and run_file.is_file() else None
    preemption = PreemptionCallback()
    callbacks = [MLflowLossCallback(), preemption, kernel_mode_callback(spec.kernels)]
    if abort_after_step is not None:
        callbacks.append(AbortAfterStep(abort_after_step))
    if spec.stop_at_step is not None:
        callbacks.append(StopAtStep(spec.stop_at_step))
    started = time.time()
    totals = RunTotals(started, last)  # the loss sum and times of the invocations before this one (none: zeros)
    callbacks.append(totals)
    tracking = (
        mlflow_run(
            experiment,
            run_name or output_path.name,
            results_dir=results_dir,
            run_id=run_id,
            tags={"kind": "train", "method": spec.method, **(tags or {})},
            params={**spec.to_dict(), "init": init, "processes": count, "grad_accum_used": grad_accum},
        )
        if main
        else contextlib.nullcontext()
    )
    with tracking as mlflow:
        if main:
            run_file.write_text(mlflow.active_run().info.run_id)
        trainer = make_trainer(spec, model, tokenizer, dataset, work_dir, callbacks, eval_dataset=evals)
        totals.trainer = trainer
        preemption.install()
        try:
            result = trainer.train(resume_from_checkpoint=last)
        finally:
            preemption.uninstall()
        if preemption.signum:
            name = signal.Signals(preemption.signum).name
            if main:
                checkpoint = work_dir / f"checkpoint-{trainer.state.global_step}"
                print(
                    f"mars train: {name} received; saved {checkpoint}: rerun the same command to resume from it",
                    file=sys.stderr,
                )
            raise Preempted(128 + preemption.signum)
        evaluated = [h for h in trainer.state.log_history if "eval_heldout_loss" in h]
        if evals is not None and (not evaluated or evaluated[-1]["step"] != trainer.state.global_step):
            trainer.evaluate()  # the final held-out loss (every process takes part)
        evaluated = [h for h in trainer.state.log_history if "eval_heldout_loss" in h]
        on_train = [h for h in trainer.state.log_history if "eval_train_loss" in h]
        history = [h for h in trainer.state.log_history if "loss" in h]
        metrics = {
            # the mean over every optimizer step of the run, the steps before a resume included (the Trainer's own
            # training_loss averages this invocation's steps only); uninterrupted, exactly the Trainer's value
            "train_loss": (totals.before["loss_sum"] + trainer._total_loss_scalar) / max(trainer.state.global_step, 1),
            "final_loss": history[-1]["loss"] if history else None,
            "final_loss_mask": history[-1].get("loss_mask") if history else None,
            "final_loss_ar": history[-1].get("loss_ar") if history else None,
            "first_loss": history[0]["loss"] if history else None,
            # next-token loss of the final weights on held-out records and on as many training records
            "final_heldout_loss": evaluated[-1]["eval_heldout_loss"] if evaluated else None,
            "final_train_slice_loss": on_train[-1]["eval_train_loss"] if on_train else None,
            "optimizer_steps": trainer.state.global_step,
            "epochs": trainer.state.epoch,
            # both summed over the invocations (each up to its last checkpoint); this process's, with several
            "train_runtime_s": totals.before["train_runtime_s"] + result.metrics.get("train_runtime", 0.0),
            "wall_time_s": totals.before["wall_time_s"] + time.time() - started,
            "wall_time_s_before_resume": totals.before["wall_time_s"],  # 0.0: not resumed
            "resumed_from": last,
            "num_examples": len(dataset),
            "dropped_examples": dropped,
            "processes": count,
            "grad_accum": grad_accum,
            "effective_batch": effective_batch,
        }
        state_dict = _final_state_dict(trainer, spec.bf16)
        if main:
            log_metrics({k: v for k, v in metrics.items() if isinstance(v, (int, float))})
            tmp = output_path.with_name(output_path.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            unwrapped = trainer.accelerator.unwrap_model(trainer.model_wrapped)
            unwrapped.save_pretrained(tmp, state_dict=state_dict, safe_serialization=True)
            if spec.bf16:  # save_pretrained records the dtype of the (fp32 master) parameters, not of the state dict
                config_file = tmp / "config.json"
                config = json.loads(config_file.read_text())
                config["dtype"] = "bfloat16"
                config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
            tokenizer.save_pretrained(tmp)
            if spec.stop_at_step is not None:  # the chain's next entry goes on from this checkpoint (resume_from)
                os.replace(work_dir / f"checkpoint-{trainer.state.global_step}", tmp / TRAINER_CHECKPOINT)
            run_config = {
                "spec": spec.to_dict(),
                "init": init,
                "data_dir": str(data_dir),
                "mask_token": mask_token,
                "resumed_from_model": resume_from,
                "experiment": experiment,
                "spec_hash": config_hash(spec.to_dict()),
                "mlflow_run_id": mlflow.active_run().info.run_id,
                "processes": count,
                "grad_accum": grad_accum,
                "effective_batch": effective_batch,
                "machine": machine_facts(),  # CPU, kernels and mode in effect, threads, versions (mars/repro.py)
                "log_history": trainer.state.log_history,
            }
            (tmp / "run_config.json").write_text(json.dumps(run_config, indent=2, default=str))
            (tmp / "metrics.json").write_text(json.dumps(metrics, indent=2, default=str))
            mlflow.log_artifact(str(tmp / "run_config.json"))
            os.replace(tmp, output_path)
        trainer.accelerator.wait_for_everyone()
    if main:
        shutil.rmtree(work_dir, ignore_errors=True)
    return metrics
