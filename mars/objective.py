"""The dual-stream training objective: L = L_mask + w_AR * L_AR (docs/method.md sections 1-3).

Inputs are what TRL's SFT data pipeline produces: ``input_ids``, ``attention_mask`` and ``labels`` (the token id on
response tokens, -100 elsewhere; unshifted).  :func:`build_dual_stream` lays out ``[clean | noisy]``;
:func:`dual_stream_loss` runs one forward and returns both losses.

Cost: the clean stream never attends to the noisy one and noisy positions before the first block that carries a loss
are never attended by anything that does, so the noisy stream starts at the first such block of the batch
(``noisy_start``) and logits are computed only where a target exists.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from mars.masks import additive, check_variant, dual_stream_mask

IGNORE = -100


@dataclass
class DualStreamBatch:
    input_ids: torch.Tensor  # [b, L + Ln]
    position_ids: torch.Tensor  # [b, L + Ln]
    allowed: torch.Tensor  # [b, L + Ln, L + Ln] boolean attention mask
    clean_targets: torch.Tensor  # [b, L]: target of each clean position (-100: none)
    noisy_targets: torch.Tensor  # [b, Ln]
    noisy_weights: torch.Tensor  # [b, Ln]: loss weight of each noisy target (1/t for block diffusion)
    noisy_start: int
    length: int  # L
    num_response: int  # response tokens (the targets the Trainer counts for loss normalisation)


def block_diffusion_masking(
    response: torch.Tensor, block_size: int, generator: torch.Generator | None, eps: float = 1e-3
) -> tuple[torch.Tensor, torch.Tensor]:
    """BD3-LM masking: one rate t ~ U(eps, 1) per (sequence, block); each response token is masked with prob. t.

    Returns the boolean mask of masked positions and the per-position rate t.
    """
    batch, length = response.shape
    n_blocks = -(-length // block_size)
    device = response.device
    rate = eps + (1 - eps) * torch.rand(batch, n_blocks, generator=generator, device=device)
    rate = rate.repeat_interleave(block_size, dim=1)[:, :length]
    draw = torch.rand(batch, length, generator=generator, device=device)
    return response & (draw < rate), rate


def build_dual_stream(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    labels: torch.Tensor,
    *,
    mask_token_id: int,
    block_size: int,
    variant: str = "mars",
    trim: bool = True,
    generator: torch.Generator | None = None,
) -> DualStreamBatch:
    check_variant(variant, block_size)
    batch, length = input_ids.shape
    response = (labels != IGNORE) & attention_mask.bool()
    device = input_ids.device

    if variant == "block_diffusion":
        # Unshifted: a masked position predicts its own token; no AR loss on the clean stream.
        masked, rate = block_diffusion_masking(response, block_size, generator)
        noisy_ids = torch.where(masked, torch.full_like(input_ids, mask_token_id), input_ids)
        noisy_targets = torch.where(masked, input_ids, torch.full_like(input_ids, IGNORE))
        noisy_weights = torch.where(masked, 1.0 / rate, torch.zeros_like(rate))
        clean_targets = torch.full_like(input_ids, IGNORE)
    else:
        # Right-shifted: position t predicts token t + 1, for response tokens only.
        shifted = torch.full_like(input_ids, IGNORE)
        shifted[:, :-1] = torch.where(response[:, 1:], input_ids[:, 1:], IGNORE)
        noisy_ids = torch.where(response, torch.full_like(input_ids, mask_token_id), input_ids)
        noisy_targets = shifted
        noisy_weights = (shifted != IGNORE).float()
        clean_targets = shifted

    noisy_start = 0
    if trim:
        has_target = (noisy_targets != IGNORE).any(dim=0)
        if has_target.any():
            first = int(torch.nonzero(has_target)[0])
            noisy_start = (first // block_size) * block_size
    positions = torch.arange(length, device=device)
    return DualStreamBatch(
        input_ids=torch.cat([input_ids, noisy_ids[:, noisy_start:]], dim=1),
        position_ids=torch.cat([positions, positions[noisy_start:]]).expand(batch, -1),
        allowed=dual_stream_mask(attention_mask, block_size, variant, noisy_start),
        clean_targets=clean_targets,
        noisy_targets=noisy_targets[:, noisy_start:],
        noisy_weights=noisy_weights[:, noisy_start:],
        noisy_start=noisy_start,
        length=length,
        num_response=int(response.sum()),
    )


def dual_stream_hidden(model, batch: DualStreamBatch) -> torch.Tensor:
    """Last hidden states [b, L + Ln, d] of one forward over the dual-stream input."""
    decoder = model.get_decoder()
    dtype = next(model.parameters()).dtype
    out = decoder(
        input_ids=batch.input_ids,
        attention_mask=additive(batch.allowed, dtype),
        position_ids=batch.position_ids,
        use_cache=False,
    )
    return out.last_hidden_state


def dual_stream_logits(model, batch: DualStreamBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """Full (clean, noisy) logits of the dual-stream forward; for tests and analysis (training uses the loss)."""
    hidden = dual_stream_hidden(model, batch)
    logits = model.get_output_embeddings()(hidden)
    return logits[:, : batch.length], logits[:, batch.length :]


def _summed_ce(model, hidden: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    select = targets != IGNORE
    logits = model.get_output_embeddings()(hidden[select]).float()
    ce = F.cross_entropy(logits, targets[select], reduction="none")
    if weights is not None:
        ce = ce * weights[select]
    return ce.sum()


def dual_stream_loss(
    model, batch: DualStreamBatch, w_ar: float, num_items: int | torch.Tensor | None = None
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Returns (L_mask + w_ar * L_AR, {"loss_mask", "loss_ar"}).

    Both sums are divided by ``num_items`` (the number of response targets of the whole gradient-accumulation
    batch, as the Trainer counts it) so that accumulation gives the same update as one big batch; without it, by the
    number of targets of this batch.
    """
    hidden = dual_stream_hidden(model, batch)
    clean_h, noisy_h = hidden[:, : batch.length], hidden[:, batch.length :]
    if num_items is None:
        num_items = batch.num_response
    denom = torch.as_tensor(num_items, device=hidden.device).clamp(min=1)
    loss_mask = _summed_ce(model, noisy_h, batch.noisy_targets, batch.noisy_weights) / denom
    if w_ar:
        loss_ar = _summed_ce(model, clean_h, batch.clean_targets, None) / denom
        loss = loss_mask + w_ar * loss_ar
    else:
        with torch.no_grad():  # logged for comparison, carries no gradient
            loss_ar = _summed_ce(model, clean_h, batch.clean_targets, None) / denom
        loss = loss_mask
    return loss, {"loss_mask": loss_mask.detach(), "loss_ar": loss_ar.detach()}
