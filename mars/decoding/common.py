"""What both decoders (``engine``: AR, MARS, Jacobi; ``block_diffusion``) use: the acceptance confidence, the model's
dtype and device, whether its forward can skip logits, the stop-sequence test."""

from __future__ import annotations

import inspect

import torch

METRICS = ("probability", "entropy", "margin")


def confidence(logits: torch.Tensor, metric: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy tokens and their confidence in (0, 1] for logits [..., V] (computed in float32)."""
    logits = logits.float()
    tokens = logits.argmax(-1)
    logp = torch.log_softmax(logits, dim=-1)
    if metric == "probability":
        conf = logp.max(-1).values.exp()
    elif metric == "entropy":
        conf = torch.exp((logp.exp() * logp).sum(-1))  # exp(-H)
    elif metric == "margin":
        top2 = logp.topk(2, dim=-1).values.exp()
        conf = top2[..., 0] - top2[..., 1]
    else:
        raise ValueError(f"unknown metric {metric!r}; expected one of {METRICS}")
    return tokens, conf


def _model_dtype(model) -> torch.dtype:
    dtype = getattr(model, "dtype", None)
    return dtype if isinstance(dtype, torch.dtype) and dtype.is_floating_point else torch.float32


def _model_device(model) -> torch.device:
    return next(model.parameters()).device


def _supports_logits_to_keep(model) -> bool:
    try:
        return "logits_to_keep" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def _ends_with(seq: list[int], suffix: list[int]) -> bool:
    return len(seq) >= len(suffix) and seq[len(seq) - len(suffix) :] == suffix
