"""Speculative decoding with MARS as the draft and/or the target (the paper's Table 6, section 4.6). Batch 1.

gpt-fast style: small functions over an explicit KV cache per model.

    Stream              one model's DynamicCache over a token sequence, with rewind (crop to a prefix) and commit
    draft_ar(...)       K one-token forwards of the draft
    draft_mars(...)     the draft's own MARS sliding-window decoding at tau until it has K tokens
    verify_layout(...)  attention and position ids of a verification window with one mask group per acceptance count
    verify(...)         ONE target forward: greedy verification of the drafts (+ the MARS group of the accepted count)
    speculative_generate(...)  the loop, per prompt

Verification. The target is fed ``[uncached | d_1 .. d_K]`` (uncached = its sequence tokens not yet in its cache,
at least the last one). The prediction made at the last uncached token and at each d_i gives the target's greedy
tokens a_0 .. a_K; the accepted count j is the length of the longest prefix with d_i == a_{i-1}, and a_j is the
bonus (j == K) or correction token. With an AR target this is plain greedy speculative decoding: the output is
exactly the target's greedy output, whatever the draft.

MARS target (section 4.6). K + 1 groups of masks follow the drafts, one per possible j. Group j is exactly the
window that one-block MARS decoding (``mars.decoding.engine``, docs/method.md section 4) appends after the sequence
s + d_1..d_j of length n + j: g = B - 1 masks (B predictions need B - 1 masks: the first prediction is the AR one,
a_j, made by d_j itself), at positions n + j .. n + j + g - 1, each attending the cache, the uncached tokens, d_1..d_j
and the earlier masks of its own group -- nothing else (not d_{j+1}.., not other groups; no real token attends a
mask). So group j computes exactly what a separate forward of s + d_1..d_j + masks would. After greedy verification
gives j, [a_j, group j's predictions] are accepted left to right at tau as in MARS decoding (a_j always): one target
forward yields j accepted drafts + up to B more tokens. At tau >= 1.0 no group is appended (plain AR target).

Caches. After the forward the target keeps [uncached | d_1..d_j] (true inputs, causal: exact) and crops the rejected
drafts and all masks (``DynamicCache.crop`` with a negative count, transformers 5); the bonus / extra tokens are fed
in the next forward. The draft's cache is rewound to the longest prefix it shares with the accepted sequence.

Counting (``SpecGeneration``): per target forward, the drafts proposed, the drafts accepted and the extra tokens
(bonus / correction + accepted MARS predictions, after EOS / stop / budget cuts); len(token_ids) == sum(accepted) +
sum(extra). ``draft_forwards`` counts the draft's forwards (AR draft: one per proposed token).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from mars.decoding.acceptance import _append, accept_mars
from mars.decoding.cache import _new_cache, _Row
from mars.decoding.common import METRICS, _model_device, _model_dtype, confidence
from mars.decoding.settings import _check_tau
from mars.training.masks import additive

MODES = ("ar", "mars")


@dataclass
class SpecGeneration:
    token_ids: list[int]  # generated tokens only (EOS included if produced)
    target_forwards: int
    draft_forwards: int
    proposed: list[int] = field(default_factory=list)  # per target forward: drafts proposed
    accepted: list[int] = field(default_factory=list)  # per target forward: drafts accepted
    extra: list[int] = field(default_factory=list)  # per target forward: tokens beyond the accepted drafts

    @property
    def tokens_per_target_forward(self) -> float:
        return len(self.token_ids) / self.target_forwards if self.target_forwards else 0.0


class Stream:
    """One model's explicit KV cache (batch 1). ``cached`` are the tokens whose keys/values it holds, in order."""

    def __init__(self, model):
        self.model = model
        self.cache = _new_cache(model)
        self.cached: list[int] = []
        self.pending = 0  # slots written by the last forward and not yet committed or cropped
        self.forwards = 0

    def rewind(self, seq: list[int]) -> list[int]:
        """Crop the cache to the longest prefix it shares with ``seq``, leaving at least one token of ``seq`` to
        feed (its prediction is needed); returns the tokens of ``seq`` to feed."""
        keep = 0
        limit = min(len(self.cached), len(seq) - 1)
        while keep < limit and self.cached[keep] == seq[keep]:
            keep += 1
        if keep < len(self.cached):
            self.cache.crop(-(len(self.cached) - keep))
            self.cached = self.cached[:keep]
        return seq[keep:]

    def forward(self, ids: list[int], position_ids=None, attention_mask=None) -> torch.Tensor:
        """Forward of ``ids`` after the cached tokens; returns float32 logits [len(ids), V]. Without a mask it is
        plain causal with positions continuing at len(cached)."""
        device = _model_device(self.model)
        out = self.model(
            input_ids=torch.tensor([ids], dtype=torch.long, device=device),
            position_ids=position_ids,
            attention_mask=attention_mask,
            past_key_values=self.cache,
            use_cache=True,
        )
        self.forwards += 1
        self.pending = len(ids)
        return out.logits[0].float()

    def commit(self, tokens: list[int]) -> None:
        """Keep the first len(tokens) slots of the last forward (they hold exactly ``tokens``), crop the rest."""
        drop = self.pending - len(tokens)
        if drop > 0:
            self.cache.crop(-drop)
        self.cached = self.cached + tokens
        self.pending = 0


def _greedy(logits: torch.Tensor, metric: str = "probability") -> tuple[list[int], list[float]]:
    tokens, conf = confidence(logits, metric)
    return tokens.tolist(), conf.tolist()


# --------------------------------------------------------------------------------------------------------------
# drafting


def draft_ar(draft: Stream, seq: list[int], k: int) -> list[int]:
    """K greedy tokens of the draft model, one forward each."""
    drafts: list[int] = []
    for _ in range(k):
        feed = draft.rewind(seq + drafts)
        logits = draft.forward(feed)
        draft.commit(feed)
        drafts.append(int(logits[-1].argmax()))
    return drafts


def draft_mars(
    draft: Stream, seq: list[int], k: int, *, block_size: int, tau: float, metric: str, mask_id: int
) -> list[int]:
    """The draft's own MARS decoding (window of B predictions, B - 1 masks, acceptance at tau) until K tokens."""
    drafts: list[int] = []
    while len(drafts) < k:
        feed = draft.rewind(seq + drafts)
        masks = min(block_size, k - len(drafts)) - 1 if tau < 1.0 else 0
        logits = draft.forward(feed + [mask_id] * masks)
        draft.commit(feed)  # the masks' slots are cropped
        tokens, conf = _greedy(logits[len(feed) - 1 :], metric)
        drafts += accept_mars(tokens, conf, tau)[: k - len(drafts)]
    return drafts


# --------------------------------------------------------------------------------------------------------------
# verification


def verify_layout(n_cached: int, n_feed: int, n_drafts: int, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention (bool [W, n_cached + W], True = may attend) and position ids [W] of the verification window
    ``[feed | d_1..d_K | group_0 | .. | group_K]`` (W = n_feed + K + (K + 1) * group), see the module docstring."""
    real = n_feed + n_drafts
    width = real + (n_drafts + 1) * group
    q = torch.arange(width)
    is_group = q >= real
    j = torch.where(is_group, (q - real) // max(group, 1), 0)  # the group's acceptance count
    i = torch.where(is_group, (q - real) % max(group, 1), 0)  # the mask's index inside its group
    n = n_cached + n_feed  # position of d_1
    positions = torch.where(is_group, n + j + i, n_cached + q)
    causal = q[None, :] <= q[:, None]
    real_real = causal & ~is_group[:, None] & ~is_group[None, :]
    group_real = is_group[:, None] & ~is_group[None, :] & (q[None, :] < n_feed + j[:, None])
    group_group = is_group[:, None] & is_group[None, :] & (j[None, :] == j[:, None]) & causal
    window = real_real | group_real | group_group
    return torch.cat([torch.ones(width, n_cached, dtype=torch.bool), window], dim=1), positions


def verify_forward(
    target: Stream, seq: list[int], drafts: list[int], group: int, mask_id: int | None
) -> tuple[torch.Tensor, list[int]]:
    """The one verification forward. Returns (logits [W, V], the fed uncached tokens); the target's cache then
    holds the whole window (pending) until :meth:`Stream.commit`."""
    feed = target.rewind(seq)
    if not group:
        return target.forward(feed + drafts), feed
    allowed, positions = verify_layout(len(target.cached), len(feed), len(drafts), group)
    device = _model_device(target.model)
    mask = additive(allowed[None].to(device), _model_dtype(target.model))
    ids = feed + drafts + [mask_id] * ((len(drafts) + 1) * group)
    return target.forward(ids, positions[None].to(device), mask), feed


def verify(
    target: Stream,
    seq: list[int],
    drafts: list[int],
    *,
    mode: str,
    block_size: int,
    tau: float,
    metric: str,
    mask_id: int | None,
) -> tuple[list[int], int]:
    """Greedy verification of ``drafts`` after ``seq`` in one target forward. Returns (the new tokens: accepted
    drafts, then a_j and, for a MARS target, group j's accepted predictions; the number of drafts accepted)."""
    group = block_size - 1 if mode == "mars" and tau < 1.0 else 0
    logits, feed = verify_forward(target, seq, drafts, group, mask_id)
    n_feed, real = len(feed), len(feed) + len(drafts)
    ar_tokens, _ = _greedy(logits[n_feed - 1 : real], metric)  # a_0 .. a_K
    j = 0
    while j < len(drafts) and drafts[j] == ar_tokens[j]:
        j += 1
    new = drafts[:j] + [ar_tokens[j]]
    if group:
        start = real + j * group
        tokens, conf = _greedy(logits[start : start + group], metric)
        new += accept_mars([ar_tokens[j]] + tokens, [1.0] + conf, tau)[1:]
    target.commit(feed + drafts[:j])  # rejected drafts and every mask are cropped
    return new, j


# --------------------------------------------------------------------------------------------------------------
# the loop


def check_speculative(k, draft_mode, target_mode, block_size, tau, draft_tau, metric, max_new_tokens, mask_id):
    if not isinstance(k, int) or isinstance(k, bool) or k < 0:
        raise ValueError(f"k (drafts per target forward) must be an integer >= 0, got {k!r}")
    for name, mode in (("draft_mode", draft_mode), ("target_mode", target_mode)):
        if mode not in MODES:
            raise ValueError(f"unknown {name} {mode!r}; expected one of {MODES}")
    if not isinstance(block_size, int) or isinstance(block_size, bool) or block_size < 1:
        raise ValueError(f"block_size must be an integer >= 1, got {block_size!r}")
    _check_tau(tau)
    _check_tau(draft_tau)
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {METRICS}")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
    if "mars" in (draft_mode, target_mode) and mask_id is None:
        raise ValueError("a MARS draft or target needs mask_token_id")


def speculative_generate(
    draft,
    target,
    prompts: list[list[int]],
    *,
    k: int = 4,
    draft_mode: str = "ar",
    target_mode: str = "ar",
    block_size: int = 4,
    tau: float = 0.95,
    draft_tau: float | None = None,
    metric: str = "probability",
    max_new_tokens: int = 256,
    eos_token_ids: list[int],
    mask_token_id: int | None = None,
    stop_sequences: list[list[int]] | None = None,
) -> list[SpecGeneration]:
    """Speculative decoding of each prompt (batch 1): the draft proposes k tokens (``draft_mode`` "ar": k one-token
    forwards; "mars": its MARS decoding at ``draft_tau``, default ``tau``), the target verifies them in one forward
    (``target_mode`` "ar": greedy; "mars": plus one mask group per acceptance count, accepted at ``tau``). Draft and
    target must share the tokenizer; they may be the same model object (each gets its own cache)."""
    draft_tau = tau if draft_tau is None else draft_tau
    check_speculative(k, draft_mode, target_mode, block_size, tau, draft_tau, metric, max_new_tokens, mask_token_id)
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("prompts must be a non-empty list of non-empty token lists")
    eos = {int(t) for t in ([eos_token_ids] if isinstance(eos_token_ids, int) else eos_token_ids or [])}
    stops = [list(map(int, s)) for s in (stop_sequences or [])]
    modes = {m: m.training for m in (draft, target)}
    for m in modes:
        m.eval()
    try:
        with torch.inference_mode():
            return [
                _one(
                    draft,
                    target,
                    list(map(int, p)),
                    k=k,
                    draft_mode=draft_mode,
                    target_mode=target_mode,
                    block_size=block_size,
                    tau=tau,
                    draft_tau=draft_tau,
                    metric=metric,
                    max_new_tokens=max_new_tokens,
                    eos=eos,
                    stops=stops,
                    mask_id=mask_token_id,
                )
                for p in prompts
            ]
    finally:
        for m, training in modes.items():
            m.train(training)


def _one(
    draft,
    target,
    prompt,
    *,
    k,
    draft_mode,
    target_mode,
    block_size,
    tau,
    draft_tau,
    metric,
    max_new_tokens,
    eos,
    stops,
    mask_id,
) -> SpecGeneration:
    row = _Row(0, list(prompt), len(prompt), max_new_tokens, [], done=max_new_tokens == 0)
    draft_stream, target_stream = Stream(draft), Stream(target)
    result = SpecGeneration([], 0, 0)
    while not row.done:
        n_drafts = min(k, row.remaining - 1)  # a target forward yields at least one token beyond its drafts
        if n_drafts <= 0:
            drafts = []
        elif draft_mode == "ar":
            drafts = draft_ar(draft_stream, row.tokens, n_drafts)
        else:
            drafts = draft_mars(
                draft_stream, row.tokens, n_drafts, block_size=block_size, tau=draft_tau, metric=metric, mask_id=mask_id
            )
        new, j = verify(
            target_stream,
            row.tokens,
            drafts,
            mode=target_mode,
            block_size=block_size,
            tau=tau,
            metric=metric,
            mask_id=mask_id,
        )
        n = _append(row, new, eos, stops)
        result.proposed.append(len(drafts))
        result.accepted.append(min(j, n))
        result.extra.append(n - min(j, n))
    result.token_ids = row.generated
    result.target_forwards = target_stream.forwards
    result.draft_forwards = draft_stream.forwards
    return result
