"""Attention per packed sequence: transformers attention implementation ``mars_segments``.

The packed dual-stream layout (:class:`mars.training.objective.PackedDualStream`) puts a micro-batch's sequences one
after another in a single row of T positions with a block-diagonal mask. Attention over the whole row would cost T^2
instead of sum(len_i^2); :func:`segment_sdpa` runs transformers' sdpa attention over each sequence's diagonal block
instead (everything off it is masked, so the result is the same). It is plain sdpa unless the forward passes
``mars_segments`` (the sequences' [start, end) spans), so the switched model behaves as before everywhere else.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

SEGMENT_ATTENTION = "mars_segments"


def segment_sdpa(module, query, key, value, attention_mask, **kwargs):
    """transformers' sdpa attention run separately over each packed sequence ``kwargs["mars_segments"]`` (the
    diagonal blocks of the block-diagonal mask: everything off them is masked); plain sdpa without it."""
    segments = kwargs.pop(SEGMENT_ATTENTION, None)
    if not segments or query.shape[0] != 1 or query.shape[2] != key.shape[2]:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    outputs = [
        sdpa_attention_forward(
            module,
            query[:, :, start:end],
            key[:, :, start:end],
            value[:, :, start:end],
            None if attention_mask is None else attention_mask[:, :, start:end, start:end],
            **kwargs,
        )[0]
        for start, end in segments
    ]
    return torch.cat(outputs, dim=1), None  # sdpa's output layout: [batch, positions, heads, head_dim]


AttentionInterface.register(SEGMENT_ATTENTION, segment_sdpa)
# and sdpa's masks: transformers builds no mask at all for an implementation it has no mask function for (a model
# switched for training would then decode, in memory, without its causal and padding masks)
AttentionMaskInterface.register(SEGMENT_ATTENTION, sdpa_mask)


def use_segment_attention(model) -> bool:
    """Switch an sdpa model to :func:`segment_sdpa` (plain sdpa unless a forward passes ``mars_segments``); the
    choice is not saved with the model. Returns whether it switched (eager and other implementations are left)."""
    config = model.config
    if config._attn_implementation == SEGMENT_ATTENTION:
        return True
    if config._attn_implementation != "sdpa":
        return False
    model.set_attn_implementation(SEGMENT_ATTENTION)
    return True
