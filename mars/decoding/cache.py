"""The decoder's state: one ``_Row`` per sequence and the explicit KV cache they share (``KVCache``).

A per-row boolean ``valid`` tensor over the cache length records which cache slots hold real tokens (pad slots and
rejected drafts written into the cache are invalid forever); the cache keeps the matching additive bias, so a step
builds only the window part of its mask (``mars/decoding/window.py``).

Finished rows (EOS, stop sequence, budget) are removed from the batch tensors and from the cache
(``batch_select_indices``); cache columns that have become invalid for all remaining rows are squeezed out
(``maybe_compact``) when they make up most of the cache, so late steps get cheaper.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from mars.decoding.common import _model_dtype


def _new_cache(model):
    from transformers import DynamicCache

    return DynamicCache(config=model.config)


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
