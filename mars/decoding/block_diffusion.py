"""Block-diffusion decoding (the BD3-LM-style baseline, docs/method.md section 3): block by block, each block's
masked positions unmasked in any order, the most confident first, against the block-causal prefix.

Called by :func:`mars.decoding.engine.generate` with ``method="block_diffusion"``; it always recomputes the prefix (a
block-diffusion model has no exact causal cache).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from mars.decoding.common import _ends_with, _model_dtype, confidence
from mars.training.masks import additive


@dataclass
class _BDRow:
    index: int
    tokens: list[int]  # prompt + tokens of completed blocks (final)
    n_prompt: int
    budget: int
    block: list[int | None]  # positions len(tokens) .. end of the current block; None = still masked
    step_of: list[int]  # for each block position: the row-local forward index that unmasked it
    out: list[int] = field(default_factory=list)  # final generated tokens
    out_steps: list[int] = field(default_factory=list)
    forwards: int = 0
    done: bool = False
    tau: float = 1.0  # this row's threshold (tau is per request)


def _bd_new_block(row: _BDRow, B: int) -> None:
    n = len(row.tokens)
    end = (n // B + 1) * B
    row.block = [None] * (end - n)
    row.step_of = [-1] * (end - n)


def bd_forward(model, rows: list[_BDRow], B: int, mask_id: int, pad_id: int, device, keep_logits: bool):
    """Forward of [tokens | current block (masks where unknown)] for every row, block-causal attention, no cache.

    Position p may attend k iff k // B <= p // B (blocks aligned at absolute positions 0, B, 2B, ...).
    Returns the (unshifted) logits [b, T, V] and the column offsets of each row's current block."""
    seqs = [r.tokens + [mask_id if t is None else t for t in r.block] for r in rows]
    lens = torch.tensor([len(s) for s in seqs], device=device)
    T = int(lens.max())
    ids = torch.full((len(rows), T), pad_id, dtype=torch.long, device=device)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s, device=device)
    col = torch.arange(T, device=device)
    pos = col[None, :].expand(len(rows), -1).contiguous()
    is_pad = col[None, :] >= lens[:, None]
    blk = col // B
    allowed = (blk[None, :] <= blk[:, None])[None] & ~is_pad[:, None, :] & ~is_pad[:, :, None]
    allowed |= torch.eye(T, dtype=torch.bool, device=device)[None] & is_pad[:, :, None]
    mask = additive(allowed, _model_dtype(model))
    start = min(len(r.tokens) for r in rows)
    kwargs = {"logits_to_keep": torch.arange(start, T, device=device)} if keep_logits else {}
    logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False, **kwargs).logits
    if not keep_logits:
        logits = logits[:, start:]
    return logits, start


def bd_decode_loop(
    model,
    rows: list[_BDRow],
    *,
    B: int,
    metric: str,
    eos: set[int],
    stops: list[list[int]],
    mask_id: int,
    pad_id: int,
    device,
    keep_logits: bool,
    stats: dict,
    bar=None,
) -> None:
    """Decode block by block. In a block, each forward unmasks every eligible masked position with confidence >=
    the row's tau and at least the single most confident one (tau >= 1: exactly that one). Eligible = still
    masked, inside the token budget and before the first EOS unmasked so far in the block (positions after an EOS
    are discarded, so they are not decoded; they stay masks in the input). Unmasked tokens are never re-masked, so
    the contiguous filled prefix of the generation is final: it is scanned left to right for EOS / stop sequences,
    which end the row there (anything after is discarded)."""
    active = [r for r in rows if not r.done]
    for r in active:
        _bd_new_block(r, B)
    while active:
        logits, start = bd_forward(model, active, B, mask_id, pad_id, device, keep_logits)
        stats["model_calls"] = stats.get("model_calls", 0) + 1
        tok, conf = confidence(logits, metric)
        tok, conf = tok.tolist(), conf.tolist()
        still = []
        for i, r in enumerate(active):
            n = len(r.tokens)
            off = n - start
            limit = len(r.block)
            limit = min(limit, r.n_prompt + r.budget - n)  # budget
            for j, t in enumerate(r.block):
                if t is not None and t in eos:
                    limit = min(limit, j + 1)
                    break
            eligible = [j for j in range(limit) if r.block[j] is None]
            # eligible is non-empty: a row without eligible positions has finished or moved on (below)
            cands = [(conf[i][off + j], j) for j in eligible]
            best = max(cands, key=lambda cj: (cj[0], -cj[1]))[1]
            chosen = {best} if r.tau >= 1.0 else {j for c, j in cands if c >= r.tau} | {best}
            for j in sorted(chosen):
                r.block[j] = tok[i][off + j]
                r.step_of[j] = r.forwards
            r.forwards += 1
            # final tokens: the contiguous filled prefix of the block
            k = len(r.out) - (n - r.n_prompt)  # block positions already moved to out
            while k < len(r.block) and r.block[k] is not None and not r.done:
                t = r.block[k]
                r.out.append(t)
                r.out_steps.append(r.step_of[k])
                if bar is not None:
                    bar.update(1)
                k += 1
                if t in eos or any(_ends_with(r.out, s) for s in stops) or len(r.out) >= r.budget:
                    r.done = True
            if r.done:
                continue
            if k == len(r.block):  # block complete: commit it, open the next one
                r.tokens = r.tokens + list(r.block)
                _bd_new_block(r, B)
            still.append(r)
        active = still
