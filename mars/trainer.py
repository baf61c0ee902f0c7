"""The two trainers: ``ARTrainer`` (AR SFT) and ``MARSTrainer`` (the dual-stream loss L = L_mask + w_AR * L_AR).

``ARTrainer`` is TRL's ``SFTTrainer`` with its loss untouched; it changes only which examples share a micro-batch
when ``sort_micro_batches`` is on (:class:`StepSortedSampler`).  ``MARSTrainer`` subclasses it.

Data preparation (chat template, completion-only labels, truncation) and collation are TRL's own: the collator is
TRL's ``DataCollatorForLanguageModeling``, which pads ``input_ids``/``labels`` and builds ``attention_mask``.  The
dual-stream input is built per micro-batch on the training device in :meth:`MARSTrainer.compute_loss`, so the same
batches feed AR SFT and every MARS variant.
"""

from __future__ import annotations

import torch
from torch.utils.data import Sampler
from trl import SFTTrainer

from mars.objective import build_dual_stream, dual_stream_loss, pad_to_block_eos


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


class MARSTrainer(ARTrainer):
    # compute_loss divides by the token count of the whole accumulated batch, so training_step must not divide again.
    loss_is_scaled_for_ga = True

    def __init__(
        self,
        *args,
        mask_token_id: int,
        block_size: int,
        variant: str = "mars",
        w_ar: float = 1.0,
        masking_seed: int = 0,
        trim_noisy_prefix: bool = True,
        loss_normalization: str = "token",
        pad_to_block: str = "none",
        mask_loss_weighting: str = "uniform",
        **kwargs,
    ):
        if variant == "block_diffusion" and w_ar:
            raise ValueError("block diffusion has unshifted logits and no AR loss: set w_ar to 0")
        if pad_to_block not in ("none", "eos"):
            raise ValueError(f"pad_to_block must be 'none' or 'eos', got {pad_to_block!r}")
        self.mask_token_id = mask_token_id
        self.block_size = block_size
        self.variant = variant
        self.w_ar = w_ar
        self.loss_normalization = loss_normalization  # token | sequence (the authors'): dual_stream_loss
        self.pad_to_block = pad_to_block  # eos: the authors' EOS padding of every example to a multiple of B
        self.mask_loss_weighting = mask_loss_weighting  # uniform | inverse_t (the authors' no-SFT weighting)
        self._step_sequences = None  # sequences in the current optimizer step (this process): sequence normalisation
        self.masking_seed = masking_seed
        self.trim_noisy_prefix = trim_noisy_prefix  # False: the dense 2L x 2L layout (benchmark reference)
        self._micro_step = (-1, 0)  # (global step, micro-batch index): seeds block-diffusion masking reproducibly
        self._part_sums = {}  # mode -> (sum of noisy CE, sum of clean CE, targets) since the last log
        super().__init__(*args, **kwargs)

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

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if not model.training:  # evaluation: the held-out NEXT-TOKEN loss (mars.train.eval_datasets), as AR SFT's
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        mode = "train"
        batch = build_dual_stream(
            inputs["input_ids"],
            inputs["attention_mask"],
            inputs["labels"],
            mask_token_id=self.mask_token_id,
            block_size=self.block_size,
            variant=self.variant,
            trim=self.trim_noisy_prefix,
            generator=self._masking_generator(inputs["input_ids"].device),
            mask_weighting=self.mask_loss_weighting,
        )
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
