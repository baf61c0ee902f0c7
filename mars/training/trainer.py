"""The two trainers: ``ARTrainer`` (AR SFT) and ``MARSTrainer`` (the dual-stream loss L = L_mask + w_AR * L_AR).

``ARTrainer`` is TRL's ``SFTTrainer`` with its loss untouched; it changes only which examples share a micro-batch
when ``sort_micro_batches`` is on (:class:`StepSortedSampler`).  ``MARSTrainer`` subclasses it.

Data preparation (chat template, completion-only labels, truncation) and collation are TRL's own: the collator is
TRL's ``DataCollatorForLanguageModeling``, which pads ``input_ids``/``labels`` and builds ``attention_mask``.  The
dual-stream input is built per micro-batch on the training device in :meth:`MARSTrainer.compute_loss`, so the same
batches feed AR SFT and every MARS variant.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.utils.data import Sampler
from trl import SFTConfig, SFTTrainer

from mars.training.objective import (
    NORMALIZATIONS,
    build_dual_stream,
    dual_stream_loss,
    pack_dual_stream,
    pad_to_block_eos,
)
from mars.training.segment_attention import use_segment_attention

VARIANTS = ("mars", "bidirectional", "block_diffusion")
# The dual-stream input of a micro-batch (all give the same loss): packed (mars.training.objective.pack_dual_stream),
# padded ([clean | noisy] rows, the noisy copy trimmed to the batch's first block with a target), dense (untrimmed)
LAYOUTS = ("packed", "padded", "dense")


@dataclass
class MARSConfig(SFTConfig):
    """TRL's ``SFTConfig`` plus the MARS fields (docs/method.md). The defaults are the pipeline's: MARS B=4 with
    L_AR at weight 1, this project's recipe (token normalisation, no EOS padding, every assistant turn), no activation
    checkpointing, no packing. The authors' recipe: ``loss_normalization="sequence", pad_to_block="eos",
    loss_turns="last"`` (and ``mask_loss_weighting="inverse_t"`` for their no-L_AR ablation).

    No intermediate checkpoints (``save_strategy="no"``): ``trainer.save_model()`` writes the final model, and
    nothing else lands beside it. A long run that should survive a stop asks for them (``save_strategy="steps",
    save_steps=...``) and resumes with ``trainer.train(resume_from_checkpoint=True)``.

    ``mask_token`` names an EXISTING token used as [MASK] when the tokenizer has none (no new parameters), e.g.
    Qwen2.5's ``"<|fim_pad|>"``.
    """

    block_size: int = field(default=4, metadata={"help": "tokens predicted per window (B); B-1 masks at decoding"})
    w_ar: float = field(default=1.0, metadata={"help": "weight of the clean stream's next-token loss L_AR"})
    variant: str = field(default="mars", metadata={"help": "mars | bidirectional | block_diffusion"})
    mask_token: str | None = field(default=None, metadata={"help": "an existing token to use as [MASK]"})
    loss_normalization: str = field(default="token", metadata={"help": "token | sequence (the authors')"})
    pad_to_block: str = field(default="none", metadata={"help": "none | eos (the authors')"})
    mask_loss_weighting: str = field(default="uniform", metadata={"help": "uniform | inverse_t (authors' no-L_AR)"})
    loss_turns: str = field(default="all", metadata={"help": "all | last: assistant turns of `messages` trained"})
    layout: str = field(
        default="packed",
        metadata={"help": "packed (no padding; the default) | padded (the reference) | dense (untrimmed 2L x 2L)"},
    )
    # unset, so off (TRL's config sets transformers' deprecated alias to True, and any value of it warns); set either
    # activation_checkpointing or gradient_checkpointing to turn it on
    gradient_checkpointing: bool | None = None
    packing: bool = False
    save_strategy: str = field(
        default="no", metadata={"help": "no (default): only save_model() writes; steps | epoch: checkpoints"}
    )

    def __post_init__(self):
        if self.bf16 is None:  # TRL's default is bf16 everywhere, which a machine without a GPU refuses
            self.bf16 = torch.cuda.is_available() and not self.fp16
        super().__post_init__()
        checks = {
            "variant": (self.variant, VARIANTS),
            "loss_normalization": (self.loss_normalization, NORMALIZATIONS),
            "pad_to_block": (self.pad_to_block, ("none", "eos")),
            "mask_loss_weighting": (self.mask_loss_weighting, ("uniform", "inverse_t")),
            "loss_turns": (self.loss_turns, ("all", "last")),
            "layout": (self.layout, LAYOUTS),
        }
        for name, (value, allowed) in checks.items():
            if value not in allowed:
                raise ValueError(f"MARSConfig.{name} must be one of {allowed}, got {value!r}")
        if not isinstance(self.block_size, int) or self.block_size < 2:
            raise ValueError(f"MARSConfig.block_size must be an integer >= 2, got {self.block_size!r}")
        if self.variant == "block_diffusion" and self.w_ar:
            raise ValueError("block diffusion has unshifted logits and no AR loss: set w_ar to 0")


class StepSortedSampler(Sampler[int]):
    """Random optimizer steps, length-sorted micro-batches.

    Each epoch is a seeded random permutation cut into groups of ``step_size`` (= micro-batch size x gradient
    accumulation steps) examples, one group per optimizer step; inside a group the examples are sorted by length,
    so its micro-batches pad little.  Which examples share an optimizer step is exactly as random as with plain
    shuffling, and with exact accumulation the update is that of the unsorted batch.  (HF's ``group_by_length``
    instead sorts mega-batches of many steps: each step then sees one length band, which in the tiny world means
    one task family at a time; it halved AR SFT accuracy there.)
    """

    def __init__(self, lengths: list[int], step_size: int, seed: int):
        self.lengths = list(lengths)
        self.step_size = step_size
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:  # the Trainer calls this before every epoch, resumed ones included
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.lengths)

    def __iter__(self):
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        order = torch.randperm(len(self.lengths), generator=generator).tolist()
        for start in range(0, len(order), self.step_size):
            yield from sorted(order[start : start + self.step_size], key=lambda i: (self.lengths[i], i))


class ARTrainer(SFTTrainer):
    def __init__(self, *args, sort_micro_batches: bool = False, **kwargs):
        self.sort_micro_batches = sort_micro_batches
        super().__init__(*args, **kwargs)

    def _get_train_sampler(self, train_dataset=None):
        if not self.sort_micro_batches:
            return super()._get_train_sampler(train_dataset)
        if self.args.world_size > 1:  # the groups are per process; sharding batches across processes breaks them
            raise ValueError("sort_micro_batches supports single-process training only")
        dataset = train_dataset if train_dataset is not None else self.train_dataset
        step_size = self.args.train_batch_size * self.args.gradient_accumulation_steps
        return StepSortedSampler([len(ids) for ids in dataset["input_ids"]], step_size, self.args.seed)


def _tokenizer_of(model, processing_class):
    if processing_class is not None:
        return processing_class
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model if isinstance(model, str) else model.config._name_or_path)


def _check_columns(dataset, args: SFTConfig, name: str, formatting: bool) -> None:
    """A data set in a format TRL trains on (``messages`` or ``conversations``, ``prompt`` and ``completion``, the
    text field, or tokenized ``input_ids``); else one ValueError naming its columns, before any work (TRL would fail
    deep inside, with ``KeyError: 'text'``)."""
    columns = getattr(dataset, "column_names", None)
    if not isinstance(columns, list) or formatting or (args.dataset_kwargs or {}).get("skip_prepare_dataset"):
        return  # (an iterable data set may not know its columns; a formatting function makes the text itself)
    text = args.dataset_text_field
    if {"messages", "conversations", "input_ids", text} & set(columns) or {"prompt", "completion"} <= set(columns):
        return
    raise ValueError(
        f"{name} has the columns {columns}; MARSTrainer trains on 'messages' (chat), 'prompt' and 'completion', "
        f"{text!r} (plain text) or tokenized 'input_ids'"
    )


def _assistant_only(dataset, tokenizer, turns: str):
    """A ``messages`` data set as (input_ids, labels) with loss on the assistant turns only (``turns``: all or the
    last), as the pipeline trains (mars.training.data.tokenize_conversation); any other data set unchanged (TRL's
    prompt-completion format already trains the completion only). An example with no assistant turn to train on is
    one ValueError, before any work (TRL would drop it silently, and with none left fail with "num_samples=0")."""
    if dataset is None or "messages" not in dataset.column_names or "input_ids" in dataset.column_names:
        return dataset
    from mars.training.data import tokenize_conversation
    from mars.training.objective import IGNORE

    def tokenize(example):
        ids, labels = tokenize_conversation(tokenizer, example["messages"], turns=turns)
        return {"input_ids": ids, "labels": labels, "trained": any(label != IGNORE for label in labels)}

    dataset = dataset.map(tokenize, remove_columns=dataset.column_names)
    untrained = [i for i, trained in enumerate(dataset["trained"]) if not trained]
    if untrained:
        where = " (with loss_turns='last' the last message must be the assistant's)" if turns == "last" else ""
        raise ValueError(
            f"{len(untrained)} of {len(dataset)} examples of train_dataset have no assistant turn to train on{where}, "
            f"the first: example {untrained[0]}; MARSTrainer trains the assistant's tokens only"
        )
    return dataset.remove_columns("trained")


class MARSTrainer(ARTrainer):
    """Dual-stream MARS fine-tuning (L = L_mask + w_AR * L_AR) as a TRL ``SFTTrainer``: it accepts what
    ``SFTTrainer`` accepts (a model or its name; ``messages`` or prompt/completion data) with a :class:`MARSConfig`.

        trainer = MARSTrainer(model="path/or/hub-id", args=MARSConfig("out", block_size=4), train_dataset=data)
        trainer.train(); trainer.save_model()

    Only assistant tokens carry loss, in both data formats. The mask token is ``mask_token_id``, else the config's
    ``mask_token``, else the tokenizer's own; the model's config records it and the block size
    (``config.mask_token_id``, ``config.mars``), so every checkpoint says how it must be decoded
    (:func:`mars.generate` reads it).
    """

    # compute_loss divides by the token count of the whole accumulated batch, so training_step must not divide again.
    loss_is_scaled_for_ga = True

    def __init__(
        self,
        model,
        args: MARSConfig | None = None,
        *,
        mask_token_id: int | None = None,
        train_dataset=None,
        eval_dataset=None,
        processing_class=None,
        **kwargs,
    ):
        args = args if args is not None else MARSConfig("mars_output")
        if not isinstance(args, MARSConfig):
            raise TypeError(f"MARSTrainer needs a MARSConfig, got {type(args).__name__}")
        datasets = {"train_dataset": train_dataset, "eval_dataset": eval_dataset}
        if isinstance(eval_dataset, dict):  # (evaluation sets by name)
            datasets.update({f"eval_dataset[{k!r}]": d for k, d in datasets.pop("eval_dataset").items()})
        for name, dataset in datasets.items():  # a data set in no format TRL knows: one line, before any work
            _check_columns(dataset, args, name, kwargs.get("formatting_func") is not None)
        tokenizer = _tokenizer_of(model, processing_class)
        if mask_token_id is None and args.mask_token is not None:
            if args.mask_token not in tokenizer.get_vocab():
                raise ValueError(f"mask token {args.mask_token!r} is not in the tokenizer's vocabulary")
            tokenizer.mask_token = args.mask_token
        mask_token_id = mask_token_id if mask_token_id is not None else tokenizer.mask_token_id
        if mask_token_id is None:
            raise ValueError("no mask token: the tokenizer has none; set MARSConfig.mask_token to an existing token")
        self.mask_token_id = mask_token_id
        self.block_size = args.block_size
        self.variant = args.variant
        self.w_ar = args.w_ar
        self.loss_normalization = args.loss_normalization  # token | sequence (the authors'): dual_stream_loss
        self.pad_to_block = args.pad_to_block  # eos: the authors' EOS padding of every example to a multiple of B
        self.mask_loss_weighting = args.mask_loss_weighting  # uniform | inverse_t (the authors' no-SFT weighting)
        self._step_sequences = None  # sequences in the current optimizer step (this process): sequence normalisation
        self.masking_seed = args.seed
        self.layout = args.layout  # packed (default) | padded | dense: the same loss, packed is the cheapest
        self._micro_step = (-1, 0)  # (global step, micro-batch index): seeds block-diffusion masking reproducibly
        self._part_sums = {}  # mode -> (sum of noisy CE, sum of clean CE, targets) since the last log
        super().__init__(
            model,
            args,
            train_dataset=_assistant_only(train_dataset, tokenizer, args.loss_turns),
            eval_dataset=eval_dataset,
            processing_class=tokenizer,
            **kwargs,
        )
        # how this model must be decoded, in its own config.json (vLLM's parallel drafting reads mask_token_id)
        unwrapped = self.accelerator.unwrap_model(self.model)
        if self.layout == "packed":
            use_segment_attention(unwrapped)  # per-sequence attention over the packed row (sdpa models)
        config = unwrapped.config
        config.mask_token_id = mask_token_id
        config.mars = {
            "method": "block_diffusion" if self.variant == "block_diffusion" else "mars",
            "block_size": self.block_size,
            "variant": self.variant,
            "mask_token": tokenizer.convert_ids_to_tokens(mask_token_id),
        }
        self.start_model = model if isinstance(model, str) else getattr(config, "_name_or_path", None) or None

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False):
        """The Trainer's save, with this model's card (README.md) beside it."""
        super().save_model(output_dir, _internal_call)
        if not _internal_call:
            self.create_model_card()
            if output_dir is not None and Path(output_dir) != Path(self.args.output_dir):
                self.write_model_card(Path(output_dir))

    def create_model_card(self, model_name: str | None = None, dataset_name: str | None = None, tags=None) -> None:
        """The card in ``args.output_dir`` (TRL writes it with every checkpoint): :meth:`write_model_card`."""
        self.write_model_card(Path(self.args.output_dir), model_name)

    def write_model_card(self, folder: Path, model_name: str | None = None) -> None:
        """A model card that names the real start (TRL's names only a hub id: "a fine-tuned version of [None]" for
        a local folder) and how the model decodes (block size, mask token, tau), which its config.json records."""
        if not self.is_world_process_zero():
            return
        from importlib.metadata import version

        import yaml

        start, decoding = self.start_model, self.accelerator.unwrap_model(self.model).config.mars
        hub = bool(start) and not Path(start).exists() and start.count("/") == 1
        meta = {"library_name": "transformers", "pipeline_tag": "text-generation", "tags": ["mars", "trl", "sft"]}
        if hub:
            meta["base_model"] = start
        origin = f"[{start}](https://huggingface.co/{start})" if hub else f"`{start}` (a local checkpoint)"
        block, mask = decoding["block_size"], f"`{decoding['mask_token']}` (id {self.mask_token_id})"
        if decoding["method"] == "block_diffusion":
            how = f"""- method `block_diffusion`, block size B = {block}: each block of B positions starts as the mask
  token {mask} and is unmasked most confident first, every prediction whose confidence is at least tau in one
  forward (at least one per forward)"""
            call = ', method="block_diffusion"'
        else:
            how = f"""- method `mars`, variant `{decoding["variant"]}`, block size B = {block}: each forward appends
  B - 1 = {block - 1} copies of the mask token {mask} to the prefix; their predictions are accepted from the left
  while their confidence is at least tau; tau = 1.0 appends no mask and is plain greedy autoregressive decoding of
  the same weights"""
            call = ""
        card = f"""---
{yaml.safe_dump(meta, sort_keys=False).strip()}
---

# {model_name or folder.name}

A fine-tuned version of {origin if start else "a model given as an object"}, trained with MARS (Mask AutoRegression,
[arXiv 2604.07023](https://arxiv.org/abs/2604.07023)) by `mars.MARSTrainer` (TRL's `SFTTrainer` with the
dual-stream loss L = L_mask + w_AR * L_AR): it emits several tokens per forward pass with no new parameters.

## Decoding

{how}
- `config.json` records the block size and the mask token (`mars`, `mask_token_id`), where the decoder reads them:

```python
from mars import generate

for out in generate(model, tokenizer, ["Your question"], tau=0.9{call}):
    print(out.text, out.tokens_per_forward)
```

## Training

w_AR {self.w_ar}, loss normalisation `{self.loss_normalization}`, EOS padding `{self.pad_to_block}`, mask loss
weighting `{self.mask_loss_weighting}`; {self.state.global_step} optimizer steps.

Framework versions: TRL {version("trl")}, Transformers {version("transformers")}, PyTorch {version("torch")}.
"""
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "README.md").write_text(card)

    def get_batch_samples(self, epoch_iterator, num_batches, device):
        """The micro-batches of one optimizer step. With EOS padding they are padded here, before the Trainer counts
        the step's targets, so that token normalisation counts the padding targets too; the step's sequence count is
        kept for sequence normalisation."""
        batch_samples = []
        for _ in range(num_batches):
            try:
                batch = next(epoch_iterator)
            except StopIteration:
                break
            if self.pad_to_block == "eos":
                batch["input_ids"], batch["attention_mask"], batch["labels"] = pad_to_block_eos(
                    batch["input_ids"],
                    batch["attention_mask"],
                    batch["labels"],
                    block_size=self.block_size,
                    eos_token_id=self.processing_class.eos_token_id,
                    pad_token_id=self.processing_class.pad_token_id,
                )
            batch_samples.append(batch)
        self._step_sequences = sum(int(b["input_ids"].shape[0]) for b in batch_samples)
        return batch_samples, self._get_num_items_in_batch(batch_samples, device)

    def _masking_generator(self, device) -> torch.Generator | None:
        if self.variant != "block_diffusion" and self.mask_loss_weighting == "uniform":
            return None
        step, index = self._micro_step
        index = index + 1 if step == self.state.global_step else 0
        self._micro_step = (self.state.global_step, index)
        generator = torch.Generator(device=device)
        # A function of (seed, step, micro-batch) only, so a resumed run draws the same masks.
        generator.manual_seed(self.masking_seed * 1_000_003 + self.state.global_step * 1009 + index)
        return generator

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        mode = "train" if self.model.training else "eval"
        sums = self._part_sums.pop(mode, None)
        if sums is not None:  # TRL's log averages each list of self._metrics: one value each
            count = max(float(sums[2]), 1.0)
            self._metrics[mode]["loss_mask"] = [float(sums[0]) / count]
            self._metrics[mode]["loss_ar"] = [float(sums[1]) / count]
        super().log(logs, start_time)

    def dual_stream(self, inputs: dict):
        """One micro-batch's dual-stream input in the configured ``layout`` (the same loss in each)."""
        batch = build_dual_stream(
            inputs["input_ids"],
            inputs["attention_mask"],
            inputs["labels"],
            mask_token_id=self.mask_token_id,
            block_size=self.block_size,
            variant=self.variant,
            trim=self.layout != "dense",
            generator=self._masking_generator(inputs["input_ids"].device),
            mask_weighting=self.mask_loss_weighting,
        )
        if self.layout == "packed":
            batch = pack_dual_stream(batch, block_size=self.block_size, variant=self.variant)
        return batch

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if (
            not model.training
        ):  # evaluation: the held-out NEXT-TOKEN loss (mars.training.data.eval_datasets), as AR SFT's
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        mode = "train"
        batch = self.dual_stream(inputs)
        counted = num_items_in_batch is not None
        if not counted:
            # No count of the accumulated batch: normalise per micro-batch and average over accumulation steps.
            steps = self.current_gradient_accumulation_steps
            num_items_in_batch = batch.num_response * steps
        loss, parts = dual_stream_loss(
            model,
            batch,
            self.w_ar,
            num_items_in_batch,
            normalization=self.loss_normalization,
            # per process: DDP's gradient average over processes then gives the mean over all sequences
            num_sequences=self._step_sequences if counted else None,
        )
        if self.loss_normalization == "sequence" and not counted:
            loss = loss / self.current_gradient_accumulation_steps
        if (
            self.loss_normalization == "token"
            and counted
            and self.args.average_tokens_across_devices
            and self.accelerator.num_processes > 1
        ):
            # The Trainer's count spans every process and DDP/FSDP average the gradients over processes: undo that
            # average, so that N processes give the update of one process on the same global batch.
            loss = loss * self.accelerator.num_processes
        # Logged as the mean over every target of the logged steps, all processes together (token-weighted, so
        # that neither the split into micro-batches nor the number of processes changes the logged value).
        count = torch.tensor(float(batch.num_response), device=parts["sum_mask"].device)
        sums = torch.stack([parts["sum_mask"], parts["sum_ar"], count])
        if self.accelerator.num_processes > 1:
            sums = self.accelerator.gather(sums.to(self.accelerator.device)).view(-1, 3).sum(0)
        self._part_sums[mode] = self._part_sums.get(mode, 0.0) + sums.double().cpu()
        if return_outputs:
            return loss, {"loss": loss}
        return loss
