"""Text in, text out, around :func:`mars.decoding.engine.generate`: chat template, batching, decoding, chunk display.

Used by ``mars generate``, the wall-clock benchmark and Figure 1.
"""

from __future__ import annotations

import inspect
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from mars.checkpoints import (
    _load_errors,
    check_fits,
    checkpoint_error,
    checkpoint_folder,
    max_positions,
    trained_block_size,
)
from mars.decoding.engine import generate
from mars.decoding.settings import NEEDS_MASK, _as_float, _check_tau, decoding_settings
from mars.pipeline.config import ConfigError


@dataclass
class TextGeneration:
    prompt: str
    text: str
    token_ids: list[int]
    forwards: int
    tokens_per_forward: float
    chunks: list[int]  # tokens accepted by each forward (Figure 1 shades them)
    chunk_texts: list[str]


DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """The device a model runs on: the given one, else CUDA when available, else the CPU."""
    if device is None or str(device) == "":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_dtype(dtype: str | torch.dtype | None, device: str | torch.device | None = None) -> torch.dtype:
    """The parameter dtype of an evaluated or benchmarked model (config ``eval.dtype``): "auto" (or None) is bf16 on
    a GPU (the paper's checkpoints are trained and saved in bf16) and fp32 on the CPU (where bf16 matmuls are slow
    and the tiny models are trained in fp32); "bfloat16" / "float16" / "float32" force one."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype is None or dtype == "auto":
        return torch.bfloat16 if resolve_device(device).type == "cuda" else torch.float32
    if dtype not in DTYPES:
        raise ConfigError(f"dtype must be auto, {', '.join(DTYPES)}; got {dtype!r}")
    return DTYPES[dtype]


def load_model(
    path: str | Path,
    dtype: str | torch.dtype | None = "auto",
    attn: str = "sdpa",
    device: str | torch.device | None = None,
):
    """Model and tokenizer of a checkpoint folder, in ``dtype`` (see :func:`resolve_dtype`) on ``device`` (None:
    CUDA when available)."""
    from transformers import AutoModelForCausalLM

    path = checkpoint_folder(path)
    device = resolve_device(device)
    dtype = resolve_dtype(dtype, device)
    tokenizer = load_tokenizer(path)
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation=attn).eval()
    except _load_errors() as exc:
        raise ConfigError(checkpoint_error(path, exc)) from None
    return model.to(device), tokenizer


def load_tokenizer(path: str | Path):
    """The tokenizer of a checkpoint folder (ConfigError, one line, when it cannot be loaded)."""
    from transformers import AutoTokenizer

    path = checkpoint_folder(path)
    try:
        return AutoTokenizer.from_pretrained(path)
    except _load_errors() as exc:
        raise ConfigError(checkpoint_error(path, exc)) from None


WINDOWED = ("mars", "mars_lossless", "block_diffusion")


def check_window(method: str, block_size: int, tau: float, name: str = "block_size") -> None:
    """A windowed decode below tau 1 needs a window of at least 2: with block size 1 there is no mask to fill, so it
    would decode one token per forward whatever tau says (training refuses block size 1 alike). At tau 1.0 no mask
    is appended whatever the window, so any block size is plain greedy AR there."""
    if method in WINDOWED and block_size < 2 and tau < 1.0:
        raise ConfigError(
            f"{name} {block_size} leaves method {method} no mask to fill: it would decode one token per forward "
            f"whatever tau (training refuses block size 1); give {name} >= 2, or tau 1.0"
        )


def default_window(path: str | Path, method: str) -> int | None:
    """The window B a checkpoint is decoded with when none is given (``mars eval``, ``generate``, ``bench`` and the
    lm-eval model alike): its trained block size; for Jacobi decoding the schema's ``eval.jacobi_block_size``; None
    for a plain AR checkpoint decoded any other way (no window: one token per forward)."""
    if method == "jacobi":
        from mars.pipeline.config import schema_defaults

        return schema_defaults("eval")["jacobi_block_size"]
    return trained_block_size(path)


def decoding_window(path: str | Path, method: str, tau: float, block_size: int | None = None) -> int:
    """The window a command decodes ``path`` with: the explicit ``block_size`` (>= 1), else the trained one
    (:func:`default_window`), else 1 for one token per forward. A MARS or block-diffusion decode at tau < 1 of a
    checkpoint that names no block size is an error: a window of 1 would silently decode one token per forward; so
    is such a decode with an explicit window of 1 (:func:`check_window`), and a window past the model's positions."""
    if block_size is not None:
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
            raise ConfigError(f"--block-size must be an integer >= 1, got {block_size!r}")
        check_fits(f"--block-size {block_size}", block_size, max_positions(path))
    try:  # (the tau check of mars.decoding.settings.decoding_settings, first: a bad tau is named as such)
        tau = _as_float("tau", tau)
        _check_tau(tau)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if block_size is not None:
        check_window(method, block_size, tau, "--block-size")
        return block_size
    window = default_window(path, method)
    if window is None and method in WINDOWED and tau < 1:
        raise ConfigError(
            f"{path}: no trained block size in its config.json (mars.block_size), so no window to decode at tau "
            f"{tau:g} with method {method}; give --block-size"
        )
    return window or 1


def encode_prompts(tokenizer, prompts: list[str], chat: bool = True) -> list[list[int]]:
    if chat:
        return [
            tokenizer.apply_chat_template(
                [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=True, return_dict=False
            )
            for p in prompts
        ]
    return [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]


def check_budget(ids: list[list[int]], budget: int, positions: int | None, method: str, block_size: int) -> None:
    """ConfigError when a tokenized prompt plus ``budget`` new tokens exceeds the model's ``positions`` (block
    diffusion fills whole blocks of its window: up to the next multiple of it)."""
    block = block_size if method == "block_diffusion" else 1
    for i, prompt_ids in enumerate(ids):
        end = -(-(len(prompt_ids) + budget) // block) * block
        check_fits(f"prompt {i} ({len(prompt_ids)} tokens) plus max_new_tokens {budget}", end, positions)


def check_decoding_args(
    method: str, cache: str, metric: str, tau: float, block_size: int, cache_block_size: int
) -> dict:
    """:func:`mars.decoding.settings.decoding_settings`, as one ConfigError line for the command line."""
    try:
        return decoding_settings(
            tau=tau, block_size=block_size, cache=cache, cache_block_size=cache_block_size, metric=metric, method=method
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def truncate_at_stop(text: str, stop: list[str]) -> str:
    """Cut the text before the first stop string (as lm-eval's HF model does with ``until``)."""
    cut = min((text.find(s) for s in stop if s and s in text), default=-1)
    return text[:cut] if cut >= 0 else text


def generate_text(
    model,
    tokenizer,
    prompts: list[str],
    *,
    batch_size: int = 16,
    chat: bool = True,
    progress: bool = False,
    stop: list[str] | None = None,
    **decode_kwargs,
) -> list[TextGeneration]:
    """``stop`` strings end a sequence: their tokenizations stop the decoder early (a stop string can also form
    across other token boundaries, so the decoded text is cut at its first occurrence as well). A string is one
    prompt. ``max_new_tokens`` must be >= 1, and each prompt with it must fit in the model's positions
    (ConfigError, before any decoding)."""
    if isinstance(prompts, str):
        prompts = [prompts]
    budget = decode_kwargs.get("max_new_tokens", inspect.signature(generate).parameters["max_new_tokens"].default)
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise ConfigError(f"max_new_tokens must be an integer >= 1, got {budget!r}")
    stop = [s for s in (stop or []) if s]
    if stop:
        decode_kwargs["stop_sequences"] = [tokenizer.encode(s, add_special_tokens=False) for s in stop]
    method = decode_kwargs.get("method", "mars")
    decode_kwargs.setdefault("mask_token_id", tokenizer.mask_token_id)  # an explicit mask_token_id wins
    if method in NEEDS_MASK and decode_kwargs["mask_token_id"] is None:
        raise ConfigError(f"method {method} needs a mask token and the tokenizer has none")
    ids = encode_prompts(tokenizer, prompts, chat)
    positions = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    check_budget(ids, budget, positions, method, decode_kwargs.get("block_size", 1))
    results: list[TextGeneration] = []
    batches = range(0, len(ids), batch_size)
    for start in tqdm(batches, desc="generate", disable=not progress or len(batches) < 2):
        batch = ids[start : start + batch_size]
        outs = generate(
            model,
            batch,
            eos_token_ids=[tokenizer.eos_token_id],
            pad_token_id=tokenizer.pad_token_id,
            **decode_kwargs,
        )
        for prompt, out in zip(prompts[start : start + batch_size], outs):
            pieces, at = [], 0
            for n in out.chunks:
                # (as the text: no end-of-turn token inside the last chunk)
                pieces.append(tokenizer.decode(out.token_ids[at : at + n], skip_special_tokens=True))
                at += n
            results.append(
                TextGeneration(
                    prompt=prompt,
                    text=truncate_at_stop(tokenizer.decode(out.token_ids, skip_special_tokens=True), stop),
                    token_ids=out.token_ids,
                    forwards=out.forwards,
                    tokens_per_forward=out.tokens_per_forward,
                    chunks=out.chunks,
                    chunk_texts=pieces,
                )
            )
    return results


def mars_generate(
    model,
    tokenizer,
    prompts: list[str],
    *,
    tau: float | list[float] = 1.0,
    method: str = "mars",
    cache: str = "cursor",
    block_size: int | None = None,
    mask_token_id: int | None = None,
    max_new_tokens: int = 256,
    **kwargs,
) -> list[TextGeneration]:
    """Decode chat prompts with a MARS model (``mars.generate``): one :class:`TextGeneration` per prompt (text,
    tokens, forwards, tokens per forward, each forward's chunk).

    The window is the block size the model was trained with, read from its own config (``config.mars``, written by
    :class:`mars.MARSTrainer`), unless ``block_size`` is given; a model that does not say it can be decoded at
    tau = 1.0 (plain greedy AR) but not below (a ValueError, never a silent window of 1). The mask token is
    ``mask_token_id``, else the tokenizer's, else ``config.mask_token_id``. ``method``: mars | mars_lossless (exactly
    greedy AR's tokens, several per forward) | ar | jacobi | block_diffusion; ``cache``: cursor | block | none |
    authors_block. Other keyword arguments go to :func:`generate_text` (``batch_size``, ``chat``, ``stop``,
    ``metric``, ``cache_block_size``). A string is one prompt. Bad settings raise one ValueError before any
    decoding: a window of 1 below tau 1 (:func:`check_window`), a window or a budget past the model's positions,
    ``max_new_tokens`` below 1."""
    from mars.decoding.settings import row_taus

    if isinstance(prompts, str):
        prompts = [prompts]
    config = getattr(model, "config", None)
    trained = getattr(config, "mars", None) or {}
    if block_size is None:
        block_size = trained.get("block_size")
        if block_size is not None:
            what = f"the model's trained block size (config.mars) {block_size}"
            check_fits(what, block_size, getattr(config, "max_position_embeddings", None))
    taus = row_taus(tau, len(prompts))
    if block_size is None:
        if method in WINDOWED and min(taus, default=1.0) < 1.0:
            raise ValueError(
                "the model's config does not say its block size (config.mars, written by MARSTrainer): pass "
                "block_size, or decode at tau = 1.0"
            )
        block_size = 1
    check_window(method, block_size, min(taus, default=1.0))
    if mask_token_id is None:
        mask_token_id = tokenizer.mask_token_id
    if mask_token_id is None:
        mask_token_id = getattr(config, "mask_token_id", None)
    return generate_text(
        model,
        tokenizer,
        prompts,
        tau=tau,
        method=method,
        cache=cache,
        block_size=block_size,
        mask_token_id=mask_token_id,
        max_new_tokens=max_new_tokens,
        **kwargs,
    )


def render_chunks(generation: TextGeneration, color: bool = False) -> str:
    """The generation with each forward's tokens grouped: ``[a b][c]...`` or, on a terminal, shaded."""
    if not color:
        return "".join(f"[{piece}]" for piece in generation.chunk_texts)
    shades = ("\x1b[48;5;153m", "\x1b[48;5;222m")
    return "".join(f"{shades[i % 2]}{piece}\x1b[0m" for i, piece in enumerate(generation.chunk_texts))


def to_json(generations: list[TextGeneration]) -> list[dict]:
    return [asdict(g) for g in generations]
