"""The dual-stream training objective: L = L_mask + w_AR * L_AR (docs/method.md sections 1-3).

Inputs are what TRL's SFT data pipeline produces: ``input_ids``, ``attention_mask`` and ``labels`` (the token id on
response tokens, -100 elsewhere; unshifted).  :func:`build_dual_stream` lays out ``[clean | noisy]``;
:func:`dual_stream_loss` runs one forward and returns both losses.

Cost: the clean stream never attends to the noisy one and noisy positions before the first block that carries a loss
are never attended by anything that does, so the noisy stream starts at the first such block of the batch
(``noisy_start``) and logits are computed only where a target exists (transformers' boolean ``logits_to_keep``).

The forward goes through the model the Trainer hands over, wrapper included (DDP, FSDP, DataParallel), so that
gradient synchronisation, parameter sharding and accelerate's bf16 autocast all apply (:func:`_forward`).

Several response spans per sequence (every assistant turn of a multi-turn conversation) need nothing special: a
response token is any token whose label is not -100, all of them are masked in the noisy stream, and blocks are
counted from position 0 of the whole sequence (docs/method.md section 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from mars.training.masks import additive, check_variant, dual_stream_mask
from mars.training.segment_attention import SEGMENT_ATTENTION

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
    row_lengths: torch.Tensor  # [b]: real (attended) tokens of each row

    @property
    def num_sequences(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def clean_counts(self) -> torch.Tensor:
        """[b]: clean-stream targets per sequence (sequence normalisation)."""
        return (self.clean_targets != IGNORE).sum(dim=1)

    def loss_targets(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """[b, L + Ln] each: (target, loss weight, in the noisy stream, sequence index) of every position."""
        targets = torch.cat([self.clean_targets, self.noisy_targets], dim=1)
        weights = torch.cat(
            [torch.ones_like(self.clean_targets, dtype=self.noisy_weights.dtype), self.noisy_weights], 1
        )
        is_noisy = torch.zeros_like(targets, dtype=torch.bool)
        is_noisy[:, self.length :] = True
        sequence = torch.arange(targets.shape[0], device=targets.device)[:, None].expand_as(targets)
        return targets, weights, is_noisy, sequence

    def forward_kwargs(self) -> dict:
        return {}


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


def pad_to_block_eos(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    labels: torch.Tensor,
    *,
    block_size: int,
    eos_token_id: int,
    pad_token_id: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The authors' EOS padding (``training.pad_to_block: eos``): each right-padded row of length L (its attention
    mask's sum) is extended with EOS tokens to the next multiple of ``block_size``; the appended tokens are attended
    and carry loss (label = EOS), so after the response the model learns to keep predicting EOS up to the block's end.
    The batch widens (with ``pad_token_id``, unattended, no loss) if a row needs more columns than it has; a row
    whose length is a multiple already is unchanged."""
    lengths = attention_mask.sum(dim=1)
    targets = (lengths + block_size - 1) // block_size * block_size
    width = max(int(targets.max()), input_ids.shape[1])
    extra = width - input_ids.shape[1]
    if extra:
        input_ids = F.pad(input_ids, (0, extra), value=pad_token_id)
        attention_mask = F.pad(attention_mask, (0, extra), value=0)
        labels = F.pad(labels, (0, extra), value=IGNORE)
    col = torch.arange(width, device=input_ids.device)[None, :]
    fill = (col >= lengths[:, None]) & (col < targets[:, None])
    input_ids = torch.where(fill, torch.full_like(input_ids, eos_token_id), input_ids)
    attention_mask = torch.where(fill, torch.ones_like(attention_mask), attention_mask)
    labels = torch.where(fill, torch.full_like(labels, eos_token_id), labels)
    return input_ids, attention_mask, labels


def inverse_t_weights(batch: int, generator: torch.Generator | None, device, eps: float = 1e-3) -> torch.Tensor:
    """The authors' no-SFT weighting (``training.mask_loss_weighting: inverse_t``): one t ~ U(eps, 1) per sequence and
    the linear schedule's weight -alpha'(t) / (1 - alpha(t) + 1e-6) = 1 / (t + 1e-6), although every response token
    is masked whatever t is. Returns [batch]."""
    t = eps + (1 - eps) * torch.rand(batch, generator=generator, device=device)
    return 1.0 / (t + 1e-6)


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
    mask_weighting: str = "uniform",
) -> DualStreamBatch:
    check_variant(variant, block_size)
    if mask_weighting not in ("uniform", "inverse_t") or (variant == "block_diffusion" and mask_weighting != "uniform"):
        raise ValueError(f"mask_weighting {mask_weighting!r} does not apply to variant {variant!r}")
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
        if mask_weighting == "inverse_t":
            noisy_weights = noisy_weights * inverse_t_weights(batch, generator, device)[:, None]
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
        row_lengths=attention_mask.sum(dim=1),
    )


@dataclass
class PackedDualStream:
    """One micro-batch of the dual stream as a single row of T positions, no padding (:func:`pack_dual_stream`)."""

    input_ids: torch.Tensor  # [1, T]
    position_ids: torch.Tensor  # [1, T]: each stream's own absolute positions
    allowed: torch.Tensor  # [1, T, T] boolean attention mask (block-diagonal over sequences)
    targets: torch.Tensor  # [1, T]: target of each position (-100: none)
    weights: torch.Tensor  # [1, T]: loss weight of each target (clean: 1; noisy: the padded layout's noisy weight)
    is_noisy: torch.Tensor  # [1, T] boolean: the position is in a noisy copy
    sequence: torch.Tensor  # [1, T]: the row of the micro-batch a position belongs to
    segments: tuple[tuple[int, int], ...]  # [start, end) of each sequence's clean + noisy positions
    clean_counts: torch.Tensor  # [b]: clean-stream targets per sequence (sequence normalisation)
    num_sequences: int
    num_response: int

    def loss_targets(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.targets, self.weights, self.is_noisy, self.sequence

    def forward_kwargs(self) -> dict:
        return {SEGMENT_ATTENTION: self.segments}


def pack_dual_stream(batch: DualStreamBatch, *, block_size: int, variant: str = "mars") -> PackedDualStream:
    """The packed layout (``MARSConfig.layout="packed"``, the training default) of a padded dual-stream batch.

    Each sequence contributes its clean copy (positions 0..L_i-1, no padding) and its noisy copy from the start s_i
    of its OWN first block with a target (the padded layout trims the noisy copy only to the earliest such block of
    the whole micro-batch), one sequence after another:

        [clean_0 | noisy_0 | clean_1 | noisy_1 | ...]

    Inside a sequence the attention rules are the padded layout's (mars.training.masks); across sequences nothing is
    attended. Every query therefore sees exactly the keys it sees in the padded layout, and the loss is the same up to
    floating-point reduction order (tests/test_packing.py), while the linear layers, most of a step's cost,
    process no padding and no other row's prompt. Attention runs per sequence with sdpa models
    (mars.training.segment_attention); other implementations get the block-diagonal mask (same result, T^2 cost).
    """
    lengths = batch.row_lengths.tolist()
    offset, length_all = batch.noisy_start, batch.length
    device = batch.input_ids.device
    parts = {name: [] for name in ("ids", "pos", "targets", "weights", "noisy", "sequence")}
    real = batch.allowed[:, :length_all, :length_all].diagonal(dim1=1, dim2=2)  # [b, L]: the attended tokens
    if not torch.equal(real, torch.arange(length_all, device=device)[None, :] < batch.row_lengths[:, None]):
        raise ValueError("the packed layout needs right-padded rows (attention mask: ones, then zeros)")
    masks, segments, start = [], [], 0
    for row, length in enumerate(lengths):
        has_target = (batch.noisy_targets[row, : max(length - offset, 0)] != IGNORE).nonzero()
        first = offset + int(has_target[0]) if len(has_target) else length  # no target: no noisy copy
        noisy_start = first // block_size * block_size if len(has_target) else -(-length // block_size) * block_size
        noisy = slice(length_all + noisy_start - offset, length_all + length - offset)
        rel = slice(noisy_start - offset, length - offset)
        clean_n, noisy_n = length, max(length - noisy_start, 0)
        piece = {
            "ids": torch.cat([batch.input_ids[row, :length], batch.input_ids[row, noisy]]),
            "pos": torch.cat([batch.position_ids[row, :length], batch.position_ids[row, noisy]]),
            "targets": torch.cat([batch.clean_targets[row, :length], batch.noisy_targets[row, rel]]),
            "weights": torch.cat(
                [torch.ones(clean_n, dtype=batch.noisy_weights.dtype, device=device), batch.noisy_weights[row, rel]]
            ),
            "noisy": torch.arange(clean_n + noisy_n, device=device) >= clean_n,
        }
        # Dead positions, left out: a row's last token has no target (nothing follows it) and, in the clean stream
        # (mars, bidirectional: a noisy query sees only EARLIER blocks of it) and in the noisy one (mars: causal in
        # the block), it is a key of no other query. Block diffusion keeps them (its targets are unshifted).
        keep = torch.ones(clean_n + noisy_n, dtype=torch.bool, device=device)
        if variant != "block_diffusion" and length:
            keep[clean_n - 1] = bool(piece["targets"][clean_n - 1] != IGNORE)
        if variant == "mars" and noisy_n:
            keep[-1] = bool(piece["targets"][-1] != IGNORE)
        mask = dual_stream_mask(torch.ones(1, length, device=device), block_size, variant, noisy_start)[0]
        for name in parts:
            if name != "sequence":
                parts[name].append(piece[name][keep])
        span = int(keep.sum())
        parts["sequence"].append(torch.full((span,), row, dtype=torch.long, device=device))
        masks.append(mask[keep][:, keep])
        segments.append((start, start + span))
        start += span
    flat = {name: torch.cat(pieces)[None, :] for name, pieces in parts.items()}
    return PackedDualStream(
        input_ids=flat["ids"],
        position_ids=flat["pos"],
        allowed=torch.block_diag(*masks)[None],
        targets=flat["targets"],
        weights=flat["weights"],
        is_noisy=flat["noisy"],
        sequence=flat["sequence"],
        segments=tuple(segments),
        clean_counts=batch.clean_counts,
        num_sequences=batch.num_sequences,
        num_response=batch.num_response,
    )


def _forward(model, batch: DualStreamBatch | PackedDualStream, logits_to_keep: int | torch.Tensor = 0) -> torch.Tensor:
    """Logits of one forward over the dual-stream input, through ``model``'s own ``forward``.

    ``model`` may be the Trainer's wrapper (DataParallel, DDP, FSDP) around the causal LM: calling it, not its
    submodules, is what runs DDP's gradient hooks, FSDP's parameter gathering and accelerate's mixed-precision autocast
    (which wraps ``forward`` only). ``logits_to_keep`` is transformers' own selector: a boolean [b, L + Ln] tensor
    projects only those positions onto the vocabulary and returns them flattened ([n, vocab], row-major).
    """
    dtype = next(model.parameters()).dtype
    out = model(
        input_ids=batch.input_ids,
        attention_mask=additive(batch.allowed, dtype),
        position_ids=batch.position_ids,
        use_cache=False,
        logits_to_keep=logits_to_keep,
        **batch.forward_kwargs(),  # the packed layout's sequences (mars.training.packing.segment_sdpa)
    )
    return out.logits


def dual_stream_logits(model, batch: DualStreamBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """Full (clean, noisy) logits of the dual-stream forward; for tests and analysis (training uses the loss)."""
    logits = _forward(model, batch)
    return logits[:, : batch.length], logits[:, batch.length :]


NORMALIZATIONS = ("token", "sequence")


def dual_stream_row_sums(model, batch: DualStreamBatch | PackedDualStream) -> tuple[torch.Tensor, torch.Tensor]:
    """Per sequence [b]: (summed weighted noisy CE, summed clean CE) of one forward; logits only where a target
    exists. Either layout: the padded one of :func:`build_dual_stream` or the packed one (mars.training.packing)."""
    targets, weights, is_noisy, sequence = batch.loss_targets()
    select = targets != IGNORE
    logits = _forward(model, batch, logits_to_keep=select).float()  # [n, vocab], row-major like targets[select]
    ce = F.cross_entropy(logits, targets[select], reduction="none") * weights[select]
    row = sequence[select]
    noisy = is_noisy[select]
    zeros = torch.zeros(batch.num_sequences, dtype=ce.dtype, device=ce.device)
    return zeros.index_add(0, row[noisy], ce[noisy]), zeros.index_add(0, row[~noisy], ce[~noisy])


def normalized_stream_losses(
    mask_rows: torch.Tensor,
    ar_rows: torch.Tensor,
    batch: DualStreamBatch,
    normalization: str,
    *,
    num_items: int | torch.Tensor | None = None,
    num_sequences: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(L_mask, L_AR) from the per-sequence sums of :func:`dual_stream_row_sums`, normalised as
    :func:`dual_stream_loss` describes."""
    if normalization == "sequence":
        counts = batch.clean_counts.clamp(min=1).to(mask_rows.dtype)
        term_mask, term_ar = (mask_rows / counts).sum(), (ar_rows / counts).sum()
        denom = torch.as_tensor(num_sequences or batch.num_sequences, device=mask_rows.device)
    else:
        term_mask, term_ar = mask_rows.sum(), ar_rows.sum()
        denom = torch.as_tensor(batch.num_response if num_items is None else num_items, device=mask_rows.device)
        denom = denom.clamp(min=1)
    return term_mask / denom, term_ar / denom


def dual_stream_loss(
    model,
    batch: DualStreamBatch,
    w_ar: float,
    num_items: int | torch.Tensor | None = None,
    *,
    normalization: str = "token",
    num_sequences: int | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Returns (L_mask + w_ar * L_AR, {"loss_mask", "loss_ar", "sum_mask", "sum_ar"}).

    ``normalization="token"``: both sums are divided by ``num_items`` (the number of response targets of the whole
    gradient-accumulation batch, as the Trainer counts it) so that accumulation gives the same update as one big
    batch; without it, by the number of targets of this batch. ``"sequence"`` (the authors' default,
    ``training.loss_normalization``): each sequence's summed CE is divided by its own target count (both streams by
    the same count) and the results are summed and divided by ``num_sequences`` (the sequences of the whole
    accumulated batch; without it, this batch's), so every example weighs the same whatever its length. With
    ``w_ar = 0`` the clean logits are still computed (L_AR is logged for comparison) but carry no gradient.
    ``sum_mask`` / ``sum_ar`` are the plain summed CE in both cases (for token-weighted logging).
    """
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got {normalization!r}")
    mask_rows, ar_rows = dual_stream_row_sums(model, batch)
    loss_mask, loss_ar = normalized_stream_losses(
        mask_rows, ar_rows, batch, normalization, num_items=num_items, num_sequences=num_sequences
    )
    loss = loss_mask + w_ar * loss_ar if w_ar else loss_mask
    parts = {"loss_mask": loss_mask.detach(), "loss_ar": loss_ar.detach()}
    return loss, {**parts, "sum_mask": mask_rows.sum().detach(), "sum_ar": ar_rows.sum().detach()}
