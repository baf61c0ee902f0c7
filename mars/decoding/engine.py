"""Decoding engine: greedy AR, MARS sliding-window multi-token decoding, lossless self-speculative MARS, Jacobi
decoding (block diffusion: ``mars/decoding/block_diffusion.py``; speculative decoding with a draft model:
``mars/decoding/speculative.py``).

In the spirit of gpt-fast's ``generate.py``: small functions over an explicit KV cache.

    prefill(...)        first window step of every row: the prompt is the row's "uncached real tokens"
    window_step(...)    one batched forward of every active row's window, acceptance, cache commit
    decode_loop(...)    prefill, then window steps until every row is finished
    generate(...)       public entry point (argument checks, method dispatch, results)

Its parts, one file each: the rows and the KV cache (``cache.py``), the window forward and its attention mask
(``window.py``), the acceptance rules (``acceptance.py``), the argument checks (``settings.py``). Beside the decode
loop, the authors' block cache (``authors_block_loop``, cache ``authors_block``) is a loop of its own over the same
parts.

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
With ``mars_lossless`` rejected drafts are never committed: the cursor cache keeps the uncached tokens + accepted
drafts (``final`` slots), marks the rest invalid and crops trailing ones; the block cache commits a block only when
every row has C final tokens.

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

from dataclasses import dataclass

import torch

from mars.decoding.acceptance import _append, accept_jacobi, accept_lossless, accept_mars
from mars.decoding.cache import KVCache, _Row
from mars.decoding.common import _model_device, _supports_logits_to_keep, confidence
from mars.decoding.settings import _validate, row_taus
from mars.decoding.window import window_forward
from mars.training.masks import additive


@dataclass
class Generation:
    token_ids: list[int]  # generated tokens only (EOS included if produced)
    forwards: int  # forwards this sequence took part in (prefill counts as 1)
    chunks: list[int]  # tokens produced by each of those forwards; sum(chunks) == len(token_ids)

    @property
    def tokens_per_forward(self) -> float:
        return len(self.token_ids) / self.forwards if self.forwards else 0.0


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
