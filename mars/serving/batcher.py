"""Continuous batching over the cursor-cache decoder: requests join and leave the ragged batch between forwards.

    batcher = ContinuousBatcher(model, tokenizer, block_size=4)
    rid = batcher.add(prompt_ids, max_new_tokens=64, tau=0.9)    # joins at the next forward
    events = batcher.step()                                      # one batched forward of every active row
    batcher.cancel(rid)                                          # leaves before the next forward

The decoder is :mod:`mars.decoding.engine`'s, unchanged: each request is a row with its own tau; a row that joins
feeds its prompt as its "uncached real tokens" in the next window (so a join is a ragged window step, not a separate
prefill), against a cache that gains a batch row of invalid slots for it (:func:`add_cache_rows`); a row that
finishes (EOS, its budget) or is cancelled leaves the batch and its cache row is dropped. Positions are per row and
attention masks are per slot, so where a row sits in the batch and which slots it left invalid change nothing: each
request decodes as it would alone (up to float rounding, the engine's own caveat). A row's tau may change between
forwards (:meth:`ContinuousBatcher.set_tau`: the load policy of ``mars serve``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mars.decoding.cache import KVCache, _Row
from mars.decoding.common import _model_device, _supports_logits_to_keep
from mars.decoding.engine import _Decoder

METHODS = ("ar", "mars", "mars_lossless")  # the window methods that can batch rows of different lengths


@dataclass
class Event:
    """What one forward did for one request: its new tokens, and whether it is finished (and why)."""

    request: int
    tokens: list[int]
    finished: bool
    reason: str | None = None  # "stop" (EOS), "length" (its budget), "cancelled"


def add_cache_rows(kv: KVCache, n: int) -> None:
    """Append ``n`` batch rows to the cache whose slots are all invalid (zeros, never attended)."""
    length = kv.length
    if length > 0:
        for layer in kv.cache.layers:
            layer.keys = torch.cat([layer.keys, layer.keys.new_zeros((n, *layer.keys.shape[1:]))])
            layer.values = torch.cat([layer.values, layer.values.new_zeros((n, *layer.values.shape[1:]))])
    kv.valid = torch.cat([kv.valid, kv.valid.new_zeros((n, length))])
    kv.bias = torch.cat([kv.bias, kv._bias_of(kv.valid[-n:])])
    kv.all_valid = kv.all_valid and length == 0


class ContinuousBatcher:
    """A ragged batch of requests decoded together, one forward per :meth:`step` (module docstring). Not
    thread-safe: one thread calls every method (``mars serve`` runs it on its scheduler thread)."""

    def __init__(
        self,
        model,
        *,
        method: str = "mars",
        block_size: int = 4,
        metric: str = "probability",
        eos_token_ids: list[int],
        pad_token_id: int,
        mask_token_id: int | None,
    ):
        if method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}; got {method!r}")
        if method != "ar" and (mask_token_id is None or block_size < 2):
            raise ValueError(f"method {method} needs a mask token and a block size >= 2")
        self.model = model.eval()
        self.stats: dict = {"model_calls": 0, "window_steps": 0, "window_slots": 0}
        self.decoder = _Decoder(
            model,
            method,
            block_size if method != "ar" else 1,
            "cursor",
            0,
            metric,
            set(eos_token_ids),
            [],
            pad_token_id,
            mask_token_id,
            _model_device(model),
            _supports_logits_to_keep(model),
            self.stats,
        )
        self.rows: list[_Row] = []  # in the cache's batch order
        self.kv = KVCache(model, 0, self.decoder.device)
        self._joining: list[_Row] = []
        self._next_id = 0

    @property
    def active(self) -> int:
        """Requests in the batch or joining at the next forward."""
        return len(self.rows) + len(self._joining)

    def add(self, prompt: list[int], *, max_new_tokens: int, tau: float = 1.0) -> int:
        """A new request (its prompt token ids); it joins the batch at the next :meth:`step`. Returns its id."""
        if not prompt:
            raise ValueError("a prompt needs at least one token")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1; got {max_new_tokens}")
        rid = self._next_id
        self._next_id += 1
        tokens = list(map(int, prompt))
        row = _Row(rid, tokens, len(tokens), max_new_tokens, list(tokens), tau=float(tau))
        self._joining.append(row)
        return rid

    def set_tau(self, request: int, tau: float) -> None:
        for row in self.rows + self._joining:
            if row.index == request:
                row.tau = float(tau)

    def cancel(self, request: int) -> bool:
        """Remove a request (a client that went away); False if it is not here (finished already)."""
        for i, row in enumerate(self._joining):
            if row.index == request:
                del self._joining[i]
                return True
        for i, row in enumerate(self.rows):
            if row.index == request:
                self._drop([j for j in range(len(self.rows)) if j != i])
                return True
        return False

    def _drop(self, keep: list[int]) -> None:
        if keep:
            self.kv.select(torch.tensor(keep, dtype=torch.long, device=self.decoder.device))
            self.rows = [self.rows[j] for j in keep]
        else:  # an empty batch starts a fresh cache (an empty cache cannot be row-selected)
            self.rows = []
            self.kv = KVCache(self.model, 0, self.decoder.device)

    def step(self) -> list[Event]:
        """One forward of every active request (the joining ones feed their prompts); returns one event per request
        that produced tokens or finished."""
        if self._joining:
            add_cache_rows(self.kv, len(self._joining))
            self.rows += self._joining
            self._joining = []
        if not self.rows:
            return []
        before = [len(r.tokens) for r in self.rows]
        rows = list(self.rows)
        with torch.inference_mode():
            alive = self.decoder.step(self.kv, rows, prefill=False)
        events = []
        for row, n in zip(rows, before):
            reason = None
            if row.done:
                reason = "stop" if row.tokens[-1] in self.decoder.eos else "length"
            events.append(Event(row.index, row.tokens[n:], row.done, reason))
        if not alive:  # (the decoder leaves an all-finished batch's cache as it was)
            self._drop([])
        else:
            self.rows = alive
        return events
