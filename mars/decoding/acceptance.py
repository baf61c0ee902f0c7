"""The acceptance rules: which of a window's greedy predictions a row keeps, and how they are appended.

MARS (``accept_mars``): greedy token at each of the M+1 window positions; the first is always accepted; then accept
from the left while the confidence (``probability``, ``entropy`` as exp(-H), ``margin``; docs/method.md section 4)
>= tau, stopping at the first rejection, at EOS (kept), at a stop sequence (kept) or at the token budget
(``_append``). tau is per row (one value per request); a row at tau >= 1.0 accepts one token per forward even when
other rows' masks are in the window.

Lossless self-speculative MARS (``accept_lossless``): the masks' predictions are drafts, not output. Row i feeds its
drafts d_i as real tokens after its uncached ones, then a fresh block of masks. The predictions made at the last
uncached token and at each draft are the model's own greedy AR tokens a_0..a_|d|: the longest prefix of d_i that
they reproduce is accepted, then the AR token after it (correction or bonus), so the output is exactly greedy AR's
(up to the float noise of ``mars/decoding/engine.py``). Only when every draft was accepted do the masks (which were
conditioned on all of them) give the next drafts: their predictions from the left while the confidence >= tau (tau
only decides how many drafts are proposed; tau >= 1.0 proposes none and appends no masks).

Jacobi (``accept_jacobi``): the window holds guesses instead of masks; a prediction is exact as long as every guess
before it matched.
"""

from __future__ import annotations

from mars.decoding.cache import _Row
from mars.decoding.common import _ends_with


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
