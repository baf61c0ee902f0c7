"""The window forward: one batched forward of every active row's window against the KV cache, shared by every
cache mode and by AR, MARS, lossless MARS and Jacobi decoding (docs/method.md section 4: why B predictions need only
B-1 masks, and why tau >= 1.0 appends none).

Every step, every active row i feeds its *uncached real tokens* r_i, followed by the masks, against the cached
keys/values of its committed tokens. Batch layout of the window (W = R + M columns):

    [ r_i (|r_i| tokens) + d_i (mars_lossless drafts) | pad up to R | M mask (or Jacobi guess) tokens ]

with explicit per-row position ids (real positions of the row's tokens, masks at n_i, n_i+1, ...) and an explicit
additive float 4D attention mask [batch, 1, W, K + W] (0 allowed, finfo.min forbidden; transformers' eager
attention ADDS a mask, so a boolean one would be silently wrong). A query attends the valid cache slots of its own
row (``mars/decoding/cache.py``: the cache keeps their additive bias); inside the window real tokens are causal
over real tokens, masks attend all real tokens of the row and earlier masks; nothing attends a pad, and a pad query
also attends itself (so no row of the mask is fully forbidden and no NaN can appear; a pad query's output is
discarded). When no row pads and every cache slot is valid the explicit mask is skipped (transformers' own causal
mask).
"""

from __future__ import annotations

import torch

from mars.decoding.cache import KVCache, _Row
from mars.decoding.common import _model_dtype
from mars.training.masks import additive


def window_forward(
    model, kv: KVCache | None, rows: list[_Row], tail: torch.Tensor, pad_id: int, keep_logits: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """One batched forward of [r_i + d_i | pad | tail_i] for every row against the cached prefix.

    The real part of row i is its uncached tokens r_i followed by its drafts d_i (``mars_lossless``; empty
    otherwise), at positions ending at n_i - 1 with n_i = len(tokens) + |d_i|. ``tail`` [b, M] holds the M window
    tokens after the real ones (masks, or Jacobi guesses), at positions n_i, n_i + 1, ...

    Returns (logits [b, D + 1 + M, V], window_valid [b, W] real-token slots), D = max_i |d_i|: column D - t is the
    prediction made by the row's t-th-last real token (t = 0..|d_i| are the AR predictions of the positions of its
    drafts and of the position after them; with no drafts anywhere that is one column, the prediction of n_i), then
    the M tail predictions. With ``kv`` None nothing is cached (the rows' ``uncached`` must then hold their whole
    sequence)."""
    device = tail.device
    b, m = tail.shape
    feeds = [r.uncached + r.drafts if r.drafts else r.uncached for r in rows]
    n_real = [len(f) for f in feeds]
    D = max(len(r.drafts) for r in rows)
    R = max(n_real)
    W = R + m
    if min(n_real) == R and (kv is None or kv.all_valid):
        # Dense window: no padding anywhere, so the attention is plain causal over [cache | window] and every row's
        # positions continue at the cache length. transformers then builds its own (cheapest) causal mask, exactly
        # as in its own greedy decoding, and only the last D + 1 + M logits are computed.
        ids = torch.tensor(feeds, dtype=torch.long, device=device)
        if m:
            ids = torch.cat([ids, tail], dim=1)
        out = model(
            input_ids=ids,
            past_key_values=kv.cache if kv is not None else None,
            use_cache=kv is not None,
            **({"logits_to_keep": D + m + 1} if keep_logits else {}),
        )
        return out.logits[:, -(D + m + 1) :], torch.ones((b, W), dtype=torch.bool, device=device)

    # Ragged window. The index bookkeeping is done on small Python lists and turned into tensors once.
    tail_rows = tail.tolist()
    ids, pos, last = [], [], []
    for f, r, t in zip(feeds, rows, tail_rows):
        L, n = len(f), len(r.tokens) + len(r.drafts)
        ids.append(f + [pad_id] * (R - L) + t)
        # right-padded real tokens at n - L .. n - 1, pad slots at position 0, tail at n, n + 1, ...
        pos.append(list(range(n - L, n)) + [0] * (R - L) + list(range(n, n + m)))
        last.append([max(0, L - (D + 1) + k) for k in range(D + 1)])  # columns of the last D + 1 real tokens
    ids = torch.tensor(ids, dtype=torch.long, device=device)
    pos = torch.tensor(pos, dtype=torch.long, device=device)

    # Mask [b, 1, W, K + W]: the cache part is the cache's running bias (the row's valid slots), the same for every
    # query of the row; the window part is causal with pad keys forbidden. A pad query also attends itself (no
    # mask row is empty, so no NaN); what a pad query attends changes nothing: its output is discarded and its
    # slot is invalid, so nothing ever attends it.
    lens = torch.tensor(n_real, device=device)
    col = torch.arange(W, device=device)
    is_real = col[None, :] < lens[:, None]  # [b, W]
    key_ok = is_real | (col[None, :] >= R)
    eye = torch.eye(W, dtype=torch.bool, device=device)
    window_ok = (col[None, :] <= col[:, None])[None] & (key_ok[:, None, :] | eye[None])
    dtype = kv.dtype if kv is not None else _model_dtype(model)
    mask = additive(window_ok, dtype)
    if kv is not None and kv.length > 0:
        mask = torch.cat([kv.bias[:, None, None, :].expand(-1, 1, W, -1), mask], dim=3)

    # logits only where they are needed: the last D + 1 real tokens of each row and the tail columns
    keep = sorted({c for row in last for c in row} | set(range(R, W)))
    index = {c: i for i, c in enumerate(keep)}
    cols = [[index[c] for c in row] + [index[c] for c in range(R, W)] for row in last]  # [b, D + 1 + M]
    kwargs = {}
    if keep_logits:
        kwargs["logits_to_keep"] = torch.tensor(keep, device=device)
    out = model(
        input_ids=ids,
        attention_mask=mask,
        position_ids=pos,
        past_key_values=kv.cache if kv is not None else None,
        use_cache=kv is not None,
        **kwargs,
    )
    logits = out.logits if keep_logits else out.logits[:, keep]
    # per-row columns: one index_select over the flattened [b * kept, V] (much cheaper than gather with an index
    # expanded over the vocabulary)
    kept = logits.shape[1]
    flat = [i * kept + c for i, row in enumerate(cols) for c in row]
    logits = logits.reshape(b * kept, -1).index_select(0, torch.tensor(flat, device=device))
    logits = logits.view(b, len(cols[0]), -1)
    return logits, is_real
