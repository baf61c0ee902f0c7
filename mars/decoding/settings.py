"""The decoding settings and their checks: what ``generate`` (``mars/decoding/engine.py``) accepts, checked before
any work with one clear ValueError (``generate``'s own arguments; ``decoding_settings`` for settings that arrive as
strings, from the lm-eval model's arguments and the command line; ``row_taus``: tau per request)."""

from __future__ import annotations

from typing import Any

from mars.decoding.common import METRICS

METHODS = ("ar", "mars", "mars_lossless", "jacobi", "block_diffusion")
NEEDS_MASK = ("mars", "mars_lossless", "block_diffusion")
CACHES = ("none", "cursor", "block", "authors_block")


def check_settings(
    method: str,
    block_size: int,
    tau: float,
    cache: str = "cursor",
    cache_block_size: int = 32,
    metric: str = "probability",
    max_new_tokens: int = 1,
) -> None:
    """ValueError with one clear message for a decoding setting that cannot work."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
    if cache not in CACHES:
        raise ValueError(f"unknown cache {cache!r}; expected one of {CACHES}")
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {METRICS}")
    _check_tau(tau)
    if not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be an integer >= 1, got {block_size!r}")
    if not isinstance(cache_block_size, int) or cache_block_size < 1:
        raise ValueError(f"cache_block_size must be an integer >= 1, got {cache_block_size!r}")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
    if cache == "authors_block" and method != "mars":
        raise ValueError(
            f"cache 'authors_block' (the authors' block-cached sampler) decodes method 'mars' only, not {method!r}"
        )


def _check_tau(tau: Any) -> None:
    if isinstance(tau, bool) or not (isinstance(tau, (int, float)) and 0.0 < tau <= 1.0):
        raise ValueError(f"tau must be in (0, 1], got {tau!r}")


def row_taus(tau: Any, batch: int) -> list[float]:
    """tau per request: a number (the same for every row) or one value per row (list, tuple, 1-D tensor or array)."""
    if hasattr(tau, "tolist") and hasattr(tau, "shape"):  # a torch tensor or a numpy array / scalar
        if len(tau.shape) > 1:
            raise ValueError(f"tau must be a number or one value per prompt, got an array of shape {tuple(tau.shape)}")
        tau = tau.tolist()
    if isinstance(tau, (list, tuple)):
        if len(tau) != batch:
            raise ValueError(f"tau has {len(tau)} values for {batch} prompts: give one per prompt, or a number")
        for t in tau:
            _check_tau(t)
        return [float(t) for t in tau]
    _check_tau(tau)
    return [float(tau)] * batch


def _as_float(name: str, value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None


def _as_int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an integer, got {value!r}") from None
    if number != int(number):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    return int(number)


def decoding_settings(*, tau, block_size, cache, cache_block_size, metric, method) -> dict:
    """The one check of a decoding setting: normalised arguments (lm-eval model args arrive as strings), or
    ValueError with one clear line."""
    args = dict(
        tau=_as_float("tau", tau),
        block_size=_as_int("block_size", block_size),
        cache=cache,
        cache_block_size=_as_int("cache_block_size", cache_block_size),
        metric=metric,
        method=method,
    )
    check_settings(
        args["method"], args["block_size"], args["tau"], args["cache"], args["cache_block_size"], args["metric"]
    )
    return args


def _validate(
    prompts, method, block_size, tau, cache, cache_block_size, metric, max_new_tokens, mask_token_id, stop_sequences
) -> None:
    check_settings(method, block_size, 1.0, cache, cache_block_size, metric, max_new_tokens)
    row_taus(tau, len(prompts))
    if method in NEEDS_MASK and mask_token_id is None:
        raise ValueError(f"method {method!r} needs mask_token_id")
    if not prompts:
        raise ValueError("prompts is empty: pass at least one tokenized prompt")
    for i, p in enumerate(prompts):
        if len(p) == 0:
            raise ValueError(f"prompt {i} is empty: every prompt needs at least one token")
    for s in stop_sequences or []:
        if len(s) == 0:
            raise ValueError("stop_sequences must not contain an empty sequence")
