"""``MARSTrainer``: TRL's ``SFTTrainer`` with the dual-stream loss L = L_mask + w_AR * L_AR.

Data preparation (chat template, completion-only labels, truncation) and collation are TRL's own: the collator is
TRL's ``DataCollatorForLanguageModeling``, which pads ``input_ids``/``labels`` and builds ``attention_mask``.  The
dual-stream input is built per micro-batch on the training device in :meth:`compute_loss`, so the same batches feed
AR SFT (plain ``SFTTrainer``) and every MARS variant.
"""

from __future__ import annotations

import torch
from trl import SFTTrainer

from mars.objective import build_dual_stream, dual_stream_loss


class MARSTrainer(SFTTrainer):
    # compute_loss divides by the token count of the whole accumulated batch, so training_step must not divide again.
    loss_is_scaled_for_ga = True

    def __init__(self, *args, mask_token_id: int, block_size: int, variant: str = "mars", w_ar: float = 1.0,
                 masking_seed: int = 0, trim_noisy_prefix: bool = True, **kwargs):
        if variant == "block_diffusion" and w_ar:
            raise ValueError("block diffusion has unshifted logits and no AR loss: set w_ar to 0")
        self.mask_token_id = mask_token_id
        self.block_size = block_size
        self.variant = variant
        self.w_ar = w_ar
        self.masking_seed = masking_seed
        self.trim_noisy_prefix = trim_noisy_prefix  # False: the dense 2L x 2L layout (benchmark reference)
        self._micro_step = (-1, 0)  # (global step, micro-batch index): seeds block-diffusion masking reproducibly
        super().__init__(*args, **kwargs)

    def _masking_generator(self, device) -> torch.Generator | None:
        if self.variant != "block_diffusion":
            return None
        step, index = self._micro_step
        index = index + 1 if step == self.state.global_step else 0
        self._micro_step = (self.state.global_step, index)
        generator = torch.Generator(device=device)
        # A function of (seed, step, micro-batch) only, so a resumed run draws the same masks.
        generator.manual_seed(self.masking_seed * 1_000_003 + self.state.global_step * 1009 + index)
        return generator

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        mode = "train" if model.training else "eval"
        batch = build_dual_stream(
            inputs["input_ids"],
            inputs["attention_mask"],
            inputs["labels"],
            mask_token_id=self.mask_token_id,
            block_size=self.block_size,
            variant=self.variant,
            trim=self.trim_noisy_prefix,
            generator=self._masking_generator(inputs["input_ids"].device),
        )
        if num_items_in_batch is None:
            # No count of the accumulated batch: normalise per micro-batch and average over accumulation steps.
            steps = self.current_gradient_accumulation_steps if model.training else 1
            num_items_in_batch = batch.num_response * steps
        loss, parts = dual_stream_loss(model, batch, self.w_ar, num_items_in_batch)
        # Logged per micro-batch as the mean over its own targets, comparable across accumulation settings.
        scale = float(num_items_in_batch) / max(batch.num_response, 1)
        for name, value in parts.items():
            self._metrics[mode][name].append(float(value) * scale)
        if return_outputs:
            return loss, {"loss": loss}
        return loss
