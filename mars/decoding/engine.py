"""Decoding engine: greedy AR, MARS sliding-window multi-token decoding, lossless self-speculative MARS, Jacobi
decoding (block diffusion: ``mars/decoding/block_diffusion.py``; speculative decoding with a draft model:
``mars/decoding/speculative.py``).

One file, in the spirit of gpt-fast's ``generate.py``: small functions over an explicit KV cache.

    prefill(...)        first window step of every row: the prompt is the row's "uncached real tokens"
    window_step(...)    one batched forward of every active row's window, acceptance, cache commit
    decode_loop(...)    prefill, then window steps until every row is finished
    generate(...)       public entry point (argument checks, method dispatch, results)

The window (docs/method.md section 4: why B predictions need only B-1 masks, and why tau >= 1.0 appends none)
------------------------------------------------------------------------------------------------------------
Every step, every active row i feeds its *uncached real tokens* r_i, followed by the masks, against the cached
keys/values of its committed tokens. Batch layout of the window (W = R + M columns):

    [ r_i (|r_i| tokens) + d_i (mars_lossless drafts) | pad up to R | M mask (or Jacobi guess) tokens ]

with explicit per-row position ids (real positions of the row's tokens, masks at n_i, n_i+1, ...) and an explicit
additive float 4D attention mask [batch, 1, W, K + W] (0 allowed, finfo.min forbidden; transformers' eager
attention ADDS a mask, so a boolean one would be silently wrong). A query attends the valid cache slots of its own
row; inside the window real tokens are causal over real tokens, masks attend all real tokens of the row and earlier
masks; nothing attends a pad, and a pad query also attends itself (so no row of the mask is fully forbidden and no
NaN can appear; a pad query's output is discarded). A per-row boolean ``valid`` tensor over the cache length
records which cache slots hold real tokens (pad slots and rejected drafts written into the cache are invalid
forever); the cache keeps the matching additive bias, so a step builds only the window part of its mask. When no
row pads and every cache slot is valid the explicit mask is skipped (transformers' own causal mask).

Cache modes (all behind the one ``window_forward``):
  none    nothing is cached, every step re-runs prompt + generated tokens + masks: O(T^2).
  cursor  exact per-sequence cursor cache: after the forward the window's real tokens (and its pad slots, marked
          invalid) are committed and the mask slots are cropped off (``crop(-M)``); the tokens accepted in this
          step become the next step's uncached real tokens, so their keys/values are computed from their true
          inputs one step later. Nothing is ever recomputed; each row advances on its own.
  block   the paper's block-level cache with cache block size C: the prompt is committed by the prefill (its
          keys/values are exact: it is computed causally from real tokens only; its pad slots are marked invalid).
          After that the uncached real tokens of a row accumulate and every step re-runs all of them + masks
          against the cache. When EVERY active row fed at least C real tokens in this step's window, the first C
          window slots of every row (all real, by that condition) are committed (``crop(-(W - C))``); otherwise the
          whole window is cropped off. Only tokens that were *inputs* of the forward can be committed, which also
          guarantees that every row keeps >= 1 uncached real token (the first prediction needs its hidden state).

Finished rows (EOS, stop sequence, budget) are removed from the batch tensors and from the cache
(``batch_select_indices``); cache columns that have become invalid for all remaining rows are squeezed out
(``_compact``) when they make up most of the cache, so late steps get cheaper.

Acceptance (``mars``): greedy token at each of the M+1 window positions; the first is always accepted; then accept
from the left while the confidence (``probability``, ``entropy`` as exp(-H), ``margin``; docs/method.md section 4)
>= tau, stopping at the first rejection, at EOS (kept), at a stop sequence (kept) or at the token budget. tau is
per row (one value per request); a row at tau >= 1.0 accepts one token per forward even when other rows' masks
are in the window.

Lossless self-speculative MARS (``mars_lossless``): the masks' predictions are drafts, not output. Row i feeds its
drafts d_i as real tokens after its uncached ones, then a fresh block of masks. The predictions made at the last
uncached token and at each draft are the model's own greedy AR tokens a_0..a_|d|: the longest prefix of d_i that
they reproduce is accepted, then the AR token after it (correction or bonus), so the output is exactly greedy AR's
(up to the float noise below). Only when every draft was accepted do the masks (which were conditioned on all of
them) give the next drafts: their predictions from the left while the confidence >= tau (tau only decides how many
drafts are proposed; tau >= 1.0 proposes none and appends no masks). Rejected drafts are never committed: the
cursor cache keeps the uncached tokens + accepted drafts (``final`` slots), marks the rest invalid and crops
trailing ones; the block cache commits a block only when every row has C final tokens.

Exactness. ``cursor`` and ``block`` compute exactly the same function as ``none`` in exact arithmetic (attention is
causal and masked slots contribute exp(finfo.min - max) == 0 exactly). In float32 the per-row results differ by
rounding noise (different kv lengths / batch shapes change the BLAS/SDPA reduction order, typically ~1e-6 in the
logits), so a greedy argmax whose top-2 logits are within that noise, or a confidence within that noise of tau, can
flip. Ties in argmax go to the lowest token id (torch.argmax), as in transformers' greedy search.

Counting: a row's ``forwards`` counts the batched forwards it took part in until it finished (prefill = 1);
``chunks[k]`` is the number of tokens the k-th of them produced. ``stats["model_calls"]`` (pass ``stats={}``)
counts the batched forward calls of the whole call; ``mars_lossless`` adds ``drafts`` (fed for verification) and
``accepted_drafts``.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

import torch

from mars.decoding.common import METRICS, _ends_with, _model_dtype, confidence
from mars.training.masks import additive

METHODS = ("ar", "mars", "mars_lossless", "jacobi", "block_diffusion")
NEEDS_MASK = ("mars", "mars_lossless", "block_diffusion")
CACHES = ("none", "cursor", "block", "authors_block")


@dataclass
class Generation:
    token_ids: list[int]  # generated tokens only (EOS included if produced)
    forwards: int  # forwards this sequence took part in (prefill counts as 1)
    chunks: list[int]  # tokens produced by each of those forwards; sum(chunks) == len(token_ids)

    @property
    def tokens_per_forward(self) -> float:
        return len(self.token_ids) / self.forwards if self.forwards else 0.0


# --------------------------------------------------------------------------------------------------------------
# small helpers


def _model_device(model) -> torch.device:
    return next(model.parameters()).device


def _supports_logits_to_keep(model) -> bool:
    try:
        return "logits_to_keep" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def _new_cache(model):
    from transformers import DynamicCache

    return DynamicCache(config=model.config)


# --------------------------------------------------------------------------------------------------------------
# per-row state and the explicit KV cache


@dataclass
class _Row:
    index: int  # position in the caller's prompt list
    tokens: list[int]  # prompt + generated tokens so far
    n_prompt: int
    budget: int  # max_new_tokens
    uncached: list[int]  # real tokens whose keys/values are not in the cache (fed at the start of the next window)
    guesses: list[int] = field(default_factory=list)  # Jacobi guesses for positions n, n+1, ...
    tau: float = 1.0  # this row's acceptance threshold (tau is per request)
    drafts: list[int] = field(default_factory=list)  # mars_lossless: unverified tokens for positions n, n+1, ...
    forwards: int = 0
    chunks: list[int] = field(default_factory=list)
    done: bool = False

    @property
    def generated(self) -> list[int]:
        return self.tokens[self.n_prompt :]

    @property
    def remaining(self) -> int:
        return self.budget - (len(self.tokens) - self.n_prompt)


class KVCache:
    """A transformers DynamicCache plus a per-row boolean ``valid`` [b, K] telling which slots hold real tokens, and
    the same as the additive attention bias ``bias`` [b, K] (0 valid, the dtype's minimum invalid), kept up to date
    slot by slot so that a ragged step does not rebuild the cache part of its mask."""

    def __init__(self, model, batch: int, device: torch.device):
        self.cache = _new_cache(model)
        self.dtype = _model_dtype(model)
        self.valid = torch.zeros(batch, 0, dtype=torch.bool, device=device)
        self.bias = torch.zeros(batch, 0, dtype=self.dtype, device=device)
        self.all_valid = True  # no padding slot anywhere (lets window_forward skip the explicit mask)

    def _bias_of(self, valid: torch.Tensor) -> torch.Tensor:
        return torch.zeros(valid.shape, dtype=self.dtype, device=valid.device).masked_fill_(
            ~valid, torch.finfo(self.dtype).min
        )

    @property
    def length(self) -> int:
        return self.valid.shape[1]

    def commit(self, window_valid: torch.Tensor, keep: int) -> None:
        """After a forward of a window of W slots: keep the first ``keep`` window slots, crop the rest."""
        width = window_valid.shape[1]
        if width - keep > 0:
            self.cache.crop(-(width - keep))
        kept = window_valid[:, :keep]
        self.all_valid = self.all_valid and bool(kept.all())
        self.valid = torch.cat([self.valid, kept], dim=1)
        self.bias = torch.cat([self.bias, self._bias_of(kept)], dim=1)

    def select(self, rows: torch.Tensor) -> None:
        """Keep only the given batch rows (finished rows drop out)."""
        if self.length > 0:
            self.cache.batch_select_indices(rows)
        self.valid = self.valid[rows]
        self.bias = self.bias[rows]
        self.all_valid = bool(self.valid.all())

    def maybe_compact(self, min_length: int = 64, max_waste: float = 0.5) -> None:
        """Squeeze out invalid slots once they exceed ``max_waste`` of a cache of >= ``min_length`` slots.

        Each row keeps its valid slots in order, left-aligned (their keys already carry their RoPE positions, and
        attention does not depend on slot order); rows with fewer valid slots are padded with invalid ones."""
        if self.all_valid or self.length < min_length or self.length == 0:
            return
        counts = self.valid.sum(1)
        new_len = int(counts.max())
        if self.length - new_len <= max_waste * self.length or not hasattr(self.cache, "layers"):
            return
        # stable order of valid slots first, per row
        order = torch.argsort((~self.valid).to(torch.int8), dim=1, stable=True)[:, :new_len]
        for layer in self.cache.layers:
            keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
            if keys is None or values is None or keys.dim() != 4 or keys.shape[2] != self.length:
                return  # unknown layer layout: leave the cache as it is (nothing changed yet for layer 0 either)
        for layer in self.cache.layers:
            idx = order[:, None, :, None].expand(-1, layer.keys.shape[1], -1, layer.keys.shape[3])
            layer.keys = torch.gather(layer.keys, 2, idx)
            layer.values = torch.gather(layer.values, 2, idx)
        self.valid = torch.arange(new_len, device=self.valid.device)[None, :] < counts[:, None]
        self.bias = self._bias_of(self.valid)
        self.all_valid = bool(self.valid.all())


# --------------------------------------------------------------------------------------------------------------
# the window forward (shared by every cache mode, by AR, MARS and Jacobi)


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


# --------------------------------------------------------------------------------------------------------------
# acceptance


def _append(row: _Row, proposed: list[int], eos: set[int], stops: list[list[int]]) -> int:
    """Append ``proposed`` tokens left to right, stopping at EOS / stop sequence / budget. Returns #appended."""
    n = 0
    for t in proposed:
        if row.remaining <= 0:
            break
        row.tokens.append(int(t))
        n += 1
        if t in eos or (
            stops and any(len(row.tokens) - row.n_prompt >= len(s) and _ends_with(row.tokens, s) for s in stops)
        ):
            row.done = True
            break
    if row.remaining <= 0:
        row.done = True
    return n


def accept_mars(tokens: list[int], conf: list[float], tau: float) -> list[int]:
    """The first token always; then from the left while conf >= tau; stop at the first rejection.

    tau >= 1.0 is one-token mode: only the first token, even where a confidence rounds to exactly 1.0 (a row at tau
    1.0 in a batch with other rows' masks must decode as it does alone, without masks)."""
    out = [tokens[0]]
    if tau >= 1.0:
        return out
    for t, c in zip(tokens[1:], conf[1:]):
        if c < tau:
            break
        out.append(t)
    return out


def accept_lossless(
    ar_tokens: list[int], drafts: list[int], mask_tokens: list[int], mask_conf: list[float], tau: float
) -> tuple[list[int], int, list[int]]:
    """Self-speculative verification. ``ar_tokens`` [|drafts| + 1] are the greedy AR predictions of the positions
    of the drafts and of the one after them; ``mask_tokens`` / ``mask_conf`` the predictions of the masks that
    followed the drafts. Returns (accepted tokens, number of drafts accepted, the next drafts).

    Accepted: the longest prefix of the drafts that greedy AR reproduces, then the AR token after it (the
    correction at the first mismatch, or the bonus when all match) -- exactly greedy AR's tokens. The masks were
    conditioned on all the drafts, so they give the next drafts only when every draft was accepted; they are
    proposed from the left while their confidence >= tau (none at tau >= 1.0)."""
    j = 0
    while j < len(drafts) and drafts[j] == ar_tokens[j]:
        j += 1
    proposed: list[int] = []
    if j == len(drafts) and tau < 1.0:
        for t, c in zip(mask_tokens, mask_conf):
            if c < tau:
                break
            proposed.append(t)
    return drafts[:j] + [ar_tokens[j]], j, proposed


def accept_jacobi(outputs: list[int], guesses: list[int]) -> tuple[list[int], list[int]]:
    """o_0 is exact; o_j is exact iff g_0..g_{j-1} == o_0..o_{j-1}. Returns (accepted, leftover outputs)."""
    m = 0
    while m < len(guesses) and m + 1 < len(outputs) and guesses[m] == outputs[m]:
        m += 1
    return outputs[: m + 1], outputs[m + 1 :]


# --------------------------------------------------------------------------------------------------------------
# prefill / window step / decode loop (AR, MARS, Jacobi)


@dataclass
class _Decoder:
    model: object
    method: str
    block_size: int
    cache: str
    cache_block_size: int
    metric: str
    eos: set[int]
    stops: list[list[int]]
    pad_id: int
    mask_id: int | None
    device: torch.device
    keep_logits: bool
    stats: dict
    bar: object = None

    def n_tail(self, rows: list[_Row]) -> int:
        """Number of mask / guess tokens in this step's window (no masks when every row is at tau >= 1.0)."""
        if self.method == "ar" or (self.method in ("mars", "mars_lossless") and all(r.tau >= 1.0 for r in rows)):
            return 0
        return min(self.block_size, max(r.remaining for r in rows)) - 1

    def tail(self, rows: list[_Row], m: int) -> torch.Tensor:
        if self.method == "jacobi":
            return torch.tensor([r.guesses[:m] for r in rows], dtype=torch.long, device=self.device).view(len(rows), m)
        return torch.full((len(rows), m), self.mask_id if m else 0, dtype=torch.long, device=self.device)

    def forward(self, kv: KVCache | None, rows: list[_Row]):
        """Returns (tail tokens [b, M], greedy tokens [b, D+1+M], confidences [b, D+1+M], window_valid [b, W])."""
        m = self.n_tail(rows)
        tail = self.tail(rows, m)
        if self.cache == "none":
            for r in rows:
                r.uncached = list(r.tokens)
        logits, window_valid = window_forward(self.model, kv, rows, tail, self.pad_id, self.keep_logits)
        self.stats["model_calls"] = self.stats.get("model_calls", 0) + 1
        tokens, conf = confidence(logits, self.metric)
        return tail, tokens, conf, window_valid

    def accept(self, rows: list[_Row], tail: torch.Tensor, tokens: torch.Tensor, conf: torch.Tensor) -> list[int]:
        """Appends each row's accepted tokens; returns how many of its drafts each row accepted (mars_lossless)."""
        D = max(len(r.drafts) for r in rows)
        tokens, conf, tail = tokens.tolist(), conf.tolist(), tail.tolist()
        verified = []
        for i, r in enumerate(rows):
            j = 0
            if self.method == "jacobi":
                proposed, leftover = accept_jacobi(tokens[i][D:], tail[i])
            elif self.method == "mars_lossless":
                d = len(r.drafts)
                proposed, j, drafts = accept_lossless(
                    tokens[i][D - d : D + 1], r.drafts, tokens[i][D + 1 :], conf[i][D + 1 :], r.tau
                )
                self.stats["drafts"] = self.stats.get("drafts", 0) + d
            else:
                proposed = accept_mars(tokens[i][D:], conf[i][D:], r.tau)
            n = _append(r, proposed, self.eos, self.stops)
            if self.method == "mars_lossless":  # drafts cut off by an EOS, a stop or the budget are not output
                self.stats["accepted_drafts"] = self.stats.get("accepted_drafts", 0) + min(j, n)
            r.forwards += 1
            r.chunks.append(n)
            new = r.tokens[len(r.tokens) - n :]
            r.uncached = r.uncached + new  # what was fed is removed from the front by commit() if committed
            if self.method == "jacobi":
                g = leftover + [new[-1]] * (self.block_size - 1)
                r.guesses = g[: self.block_size - 1]
            elif self.method == "mars_lossless":
                # a draft beyond the budget could never be used: the next step yields at most |drafts| + 1 tokens
                r.drafts = drafts[: max(0, r.remaining - 1)]
            verified.append(j)
            if self.bar is not None:
                self.bar.update(n)
        return verified

    def commit(
        self, kv: KVCache | None, rows: list[_Row], final: list[int], window_valid: torch.Tensor, prefill: bool
    ) -> None:
        """Cache policy after a forward. ``final`` = number of leading real window tokens of each row that are now
        part of its sequence: every real token it fed, except rejected drafts (mars_lossless)."""
        if kv is None:
            return
        final_t = torch.tensor(final, device=window_valid.device)
        col = torch.arange(window_valid.shape[1], device=window_valid.device)
        valid = window_valid & (col[None, :] < final_t[:, None])  # rejected drafts are never attended again
        keep = max(final)  # the kept slots: the real + pad part of the window, less trailing rejected drafts
        if self.cache == "cursor" or prefill:
            kv.commit(valid, keep=keep)
            for r, L in zip(rows, final):
                r.uncached = r.uncached[L:]
        elif self.cache == "block":
            C = self.cache_block_size
            if min(final) >= C:
                kv.commit(valid, keep=C)
                for r in rows:
                    r.uncached = r.uncached[C:]
            else:
                kv.commit(valid, keep=0)

    def step(self, kv: KVCache | None, rows: list[_Row], prefill: bool) -> list[_Row]:
        fed = [len(r.tokens) if self.cache == "none" else len(r.uncached) for r in rows]
        tail, tokens, conf, window_valid = self.forward(kv, rows)
        if not prefill:  # the window widths actually fed (a ragged batch pads every row to its widest)
            self.stats["window_steps"] += 1
            self.stats["window_slots"] += window_valid.shape[1]
        verified = self.accept(rows, tail, tokens, conf)
        self.commit(kv, rows, [f + j for f, j in zip(fed, verified)], window_valid, prefill)
        alive = [i for i, r in enumerate(rows) if not r.done]
        if len(alive) < len(rows) and kv is not None and alive:
            kv.select(torch.tensor(alive, dtype=torch.long, device=self.device))
        if kv is not None and alive:
            kv.maybe_compact()
        return [rows[i] for i in alive]


def prefill(dec: _Decoder, kv: KVCache | None, rows: list[_Row]) -> list[_Row]:
    """First forward of every row: its uncached real tokens are the prompt; the prompt is committed to the cache."""
    return dec.step(kv, rows, prefill=True)


def window_step(dec: _Decoder, kv: KVCache | None, rows: list[_Row]) -> list[_Row]:
    """One batched window forward of all active rows; returns the rows still active."""
    return dec.step(kv, rows, prefill=False)


def decode_loop(dec: _Decoder, rows: list[_Row]) -> None:
    kv = None if dec.cache == "none" else KVCache(dec.model, len(rows), dec.device)
    active = prefill(dec, kv, [r for r in rows if not r.done])
    while active:
        active = window_step(dec, kv, active)


# --------------------------------------------------------------------------------------------------------------
# the authors' block cache (method mars, cache "authors_block")


def _block_forward(dec: _Decoder, kv: KVCache, ids: list[list[int]], starts: list[int]) -> torch.Tensor:
    """One forward of a [b, c] block of row i at positions starts[i] .. starts[i] + c - 1 against the cache (causal
    inside the block, the row's valid cache slots before it); the keys/values are appended to the cache (the caller
    crops or keeps them). Returns the logits [b, c, V]."""
    b, c = len(ids), len(ids[0])
    x = torch.tensor(ids, dtype=torch.long, device=dec.device)
    dec.stats["model_calls"] = dec.stats.get("model_calls", 0) + 1
    if kv.all_valid and len(set(starts)) == 1 and kv.length == starts[0]:
        return dec.model(input_ids=x, past_key_values=kv.cache, use_cache=True).logits
    pos = torch.tensor(starts, device=dec.device)[:, None] + torch.arange(c, device=dec.device)[None, :]
    causal = additive(torch.ones(1, c, c, dtype=torch.bool, device=dec.device).tril(), kv.dtype)  # [1, 1, c, c]
    mask = torch.cat([kv.bias[:, None, None, :].expand(-1, 1, c, -1), causal.expand(b, 1, c, c)], dim=3)
    out = dec.model(input_ids=x, attention_mask=mask, position_ids=pos, past_key_values=kv.cache, use_cache=True)
    return out.logits


def authors_block_loop(dec: _Decoder, rows: list[_Row]) -> None:
    """The authors' block cache (their ``MARSBlockCachedSampler``, the definition behind the paper's Table 5;
    docs/method.md section 7). Blocks of C = ``cache_block_size`` positions are counted from each row's prompt end.
    A block starts as C masks; every inner forward re-runs the whole block, [its filled tokens | masks], against the
    cache of the committed prefix and is then cropped off the cache. A row accepts from its first unfilled position
    k: the prediction there is the AR one (made by the block's token k - 1, or for k = 0 the last logit of the
    previous forward), then the masks' predictions while their confidence >= tau (``accept_mars``). The window is
    the rest of the block: C - k - 1 masks, not the B - 1 the model was trained with. When every row has filled its
    block or finished, one more forward commits the block to the cache and gives the logit of the next block's first
    position. Rows that filled their block wait for the others (they stay in the batch, as in the authors' code).

    Counting: the prefill and every commit forward produce 0 tokens; a row's ``forwards`` counts the prefill, the
    inner forwards while it was filling, and the commits of its blocks (so tau = 1.0 costs C + 1 forwards per C
    tokens); ``stats["model_calls"]`` counts every batched call."""
    C = dec.cache_block_size
    active = [r for r in rows if not r.done]
    kv = KVCache(dec.model, len(active), dec.device)
    empty = torch.zeros((len(active), 0), dtype=torch.long, device=dec.device)
    logits, window_valid = window_forward(dec.model, kv, active, empty, dec.pad_id, dec.keep_logits)
    dec.stats["model_calls"] = dec.stats.get("model_calls", 0) + 1
    kv.commit(window_valid, keep=window_valid.shape[1])
    first = logits[:, -1]  # [b, V]: the prediction of each row's next position
    for r in active:
        r.uncached = []
        r.forwards += 1
        r.chunks.append(0)

    def drop_finished(first: torch.Tensor, active: list[_Row]):
        alive = [i for i, r in enumerate(active) if not r.done]
        if len(alive) < len(active) and alive:
            index = torch.tensor(alive, dtype=torch.long, device=dec.device)
            kv.select(index)
            first = first.index_select(0, index)
        return first, [active[i] for i in alive]

    while active:
        c = min(C, min(r.remaining for r in active))
        starts = [len(r.tokens) for r in active]
        while True:
            filling = [i for i, (r, s) in enumerate(zip(active, starts)) if len(r.tokens) - s < c]
            if not filling:
                break
            ids = [r.tokens[s:] + [dec.mask_id] * (c - (len(r.tokens) - s)) for r, s in zip(active, starts)]
            logits = _block_forward(dec, kv, ids, starts)
            kv.commit(torch.ones((len(active), c), dtype=torch.bool, device=dec.device), keep=0)
            dec.stats["window_steps"] += 1
            dec.stats["window_slots"] += c
            for i in filling:
                r, k = active[i], len(active[i].tokens) - starts[i]
                candidates = torch.cat([first[i : i + 1] if k == 0 else logits[i, k - 1 : k], logits[i, k : c - 1]])
                tokens, conf = confidence(candidates, dec.metric)
                n = _append(r, accept_mars(tokens.tolist(), conf.tolist(), r.tau), dec.eos, dec.stops)
                r.forwards += 1
                r.chunks.append(n)
                if dec.bar is not None:
                    dec.bar.update(n)
            first, kept = drop_finished(first, active)
            starts = [s for r, s in zip(active, starts) if not r.done]
            active = kept
            if not active:
                return
        # commit the filled block of every row; its last logit predicts the next block's first position
        logits = _block_forward(dec, kv, [r.tokens[s : s + c] for r, s in zip(active, starts)], starts)
        kv.commit(torch.ones((len(active), c), dtype=torch.bool, device=dec.device), keep=c)
        first = logits[:, -1]
        for r in active:
            r.forwards += 1
            r.chunks.append(0)
        kv.maybe_compact()


# --------------------------------------------------------------------------------------------------------------
# public entry point


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


def generate(
    model,
    prompts: list[list[int]],
    *,
    method: str = "mars",
    block_size: int = 4,
    tau: float | list[float] | torch.Tensor = 1.0,
    cache: str = "cursor",
    cache_block_size: int = 32,
    metric: str = "probability",
    max_new_tokens: int = 256,
    eos_token_ids: list[int],
    pad_token_id: int,
    mask_token_id: int | None = None,
    stop_sequences: list[list[int]] | None = None,
    progress: bool = False,
    stats: dict | None = None,
) -> list[Generation]:
    """Greedy decoding of a ragged batch of tokenized prompts; see the module docstring.

    method: "ar" (one token per forward, KV cache per ``cache``), "mars" (sliding window of ``block_size``
    predictions, B-1 masks, acceptance by ``metric`` >= ``tau``; tau == 1.0 is one-token mode = greedy AR),
    "mars_lossless" (self-speculative MARS: the masks' predictions at confidence >= tau are drafts, verified by the
    next forward against the model's own AR predictions; output exactly greedy AR's), "jacobi" (window of
    block_size, exact), "block_diffusion" (BD3-LM style model, block size ``block_size``; always recomputes,
    ``cache`` is ignored). ``tau`` is a number or one value per prompt (a row decodes as it would alone).
    ``stats``, if given, gets ``model_calls`` (batched forward calls), ``window_steps`` and ``window_slots`` (the
    forwards after the prefill and the sum of their window widths, padding included; not for block_diffusion)
    and, for mars_lossless, ``drafts`` (drafts fed for verification) and ``accepted_drafts``.
    Stop sequences are matched against the generated tokens only and are kept in the output. The model is put in
    eval mode for the call (its previous mode is restored) and run under torch.inference_mode()."""
    _validate(
        prompts, method, block_size, tau, cache, cache_block_size, metric, max_new_tokens, mask_token_id, stop_sequences
    )
    taus = row_taus(tau, len(prompts))
    if isinstance(eos_token_ids, int):
        eos_token_ids = [eos_token_ids]
    eos = {int(t) for t in (eos_token_ids or [])}
    stops = [list(map(int, s)) for s in (stop_sequences or [])]
    stats = stats if stats is not None else {}
    stats.update(model_calls=0, window_steps=0, window_slots=0)
    device = _model_device(model)
    keep_logits = _supports_logits_to_keep(model)

    from tqdm.auto import tqdm

    bar = tqdm(total=len(prompts) * max_new_tokens, disable=not progress, desc=f"generate[{method}]", unit="tok")
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            if method == "block_diffusion":
                from mars.decoding.block_diffusion import _BDRow, bd_decode_loop

                bd_rows = [
                    _BDRow(i, list(map(int, p)), len(p), max_new_tokens, [], [], done=max_new_tokens == 0, tau=t)
                    for i, (p, t) in enumerate(zip(prompts, taus))
                ]
                bd_decode_loop(
                    model,
                    bd_rows,
                    B=block_size,
                    metric=metric,
                    eos=eos,
                    stops=stops,
                    mask_id=mask_token_id,
                    pad_id=pad_token_id,
                    device=device,
                    keep_logits=keep_logits,
                    stats=stats,
                    bar=bar,
                )
                results = []
                for r in bd_rows:
                    chunks = [0] * r.forwards
                    for s in r.out_steps:
                        chunks[s] += 1
                    results.append(Generation(list(r.out), r.forwards, chunks))
                return results

            rows = [
                _Row(i, list(map(int, p)), len(p), max_new_tokens, list(map(int, p)), done=max_new_tokens == 0, tau=t)
                for i, (p, t) in enumerate(zip(prompts, taus))
            ]
            for r in rows:
                r.guesses = [r.tokens[-1]] * (block_size - 1)
            dec = _Decoder(
                model,
                method,
                block_size,
                cache,
                cache_block_size,
                metric,
                eos,
                stops,
                pad_token_id,
                mask_token_id,
                device,
                keep_logits,
                stats,
                bar,
            )
            if any(not r.done for r in rows):
                authors_block_loop(dec, rows) if cache == "authors_block" else decode_loop(dec, rows)
            return [Generation(r.generated, r.forwards, r.chunks) for r in rows]
    finally:
        model.train(was_training)
        bar.close()
