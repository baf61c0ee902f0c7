"""Tests of ``generate(method="mars_lossless")`` (self-speculative MARS: exactly greedy AR output) and of per-request
tau (one tau per row of a batch), against Hugging Face greedy ``generate``, single-row runs and the naive MARS
reference of test_decoding."""

from __future__ import annotations

import pytest
import torch

from mars.decoding.engine import generate
from tests.test_decoding import (
    EOS,
    MASK,
    PAD,
    TRAINED_PROMPTS,
    VOCAB,
    check_counts,
    hf_greedy,
    naive_mars,
    trained_model,
)

pytestmark = pytest.mark.usefixtures("single_thread")


def mixed_prompts() -> list[list[int]]:
    """Arithmetic progressions (long spans the trained model predicts confidently) and random-token prompts
    (nothing to predict), of different lengths: a ragged batch."""
    g = torch.Generator().manual_seed(3)
    random_prompts = [torch.randint(3, VOCAB, (n,), generator=g).tolist() for n in (5, 9, 2, 13)]
    return TRAINED_PROMPTS[:6] + random_prompts


KW = dict(block_size=4, eos_token_ids=[EOS], pad_token_id=PAD, mask_token_id=MASK)


# ---------------------------------------------------------------------------------------------------------------
# mars_lossless == greedy AR


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_lossless_equals_hf_greedy_on_a_ragged_batch(impl):
    model = trained_model(impl)
    prompts = mixed_prompts()
    ref = hf_greedy(model, prompts, 40, eos_id=EOS)
    for tau in (0.5, 0.8, 0.95, 1.0):
        for cache, C in (("cursor", 32), ("none", 32), ("block", 4)):
            stats = {}
            gens = generate(
                model,
                prompts,
                method="mars_lossless",
                tau=tau,
                cache=cache,
                cache_block_size=C,
                max_new_tokens=40,
                stats=stats,
                **KW,
            )
            assert [g.token_ids for g in gens] == ref, (tau, cache)
            check_counts(gens, 40, stats)
            assert stats["accepted_drafts"] <= stats["drafts"]
            if tau == 1.0:  # no masks, no drafts: plain AR
                assert stats["drafts"] == 0 and all(set(g.chunks) == {1} for g in gens)
            if tau == 0.5:  # drafts are accepted and rejected (rejected ones cropped / invalidated), fewer forwards
                assert 0 < stats["accepted_drafts"] < stats["drafts"]
                assert sum(g.forwards for g in gens) < sum(len(g.token_ids) for g in gens)


def test_lossless_with_per_row_tau_budgets_and_stop_sequences():
    model = trained_model()
    prompts = mixed_prompts()
    taus = [0.5, 1.0, 0.8, 0.3, 0.95, 0.6, 0.5, 1.0, 0.2, 0.7]
    for max_new in (1, 3, 7, 30):
        ref = hf_greedy(model, prompts, max_new, eos_id=EOS)
        gens = generate(model, prompts, method="mars_lossless", tau=taus, max_new_tokens=max_new, **KW)
        assert [g.token_ids for g in gens] == ref
        check_counts(gens, max_new)
        for prompt, tau in zip(prompts, taus):  # the draft counter, row by row
            stats = {}
            (g,) = generate(model, [prompt], method="mars_lossless", tau=tau, max_new_tokens=max_new, stats=stats, **KW)
            # every forward emits its verified drafts, then one token of its own (the prefill: only that one),
            # except the last, which the budget or EOS may cut anywhere: T - F <= accepted drafts <= T - F + 1
            excess = stats.get("accepted_drafts", 0) - (len(g.token_ids) - g.forwards)
            assert 0 <= excess <= 1, (max_new, tau, excess)
    stop = ref[0][4:6]
    gens = generate(model, prompts, method="mars_lossless", tau=0.3, max_new_tokens=30, stop_sequences=[stop], **KW)
    for r, g in zip(ref, gens):
        cut = next((i + 2 for i in range(len(r) - 1) if r[i : i + 2] == stop), None)
        assert g.token_ids == (r[:cut] if cut else r)
    for prompt in prompts:  # a stop sequence may end a row inside a forward's verified drafts
        stats = {}
        kw = dict(tau=0.3, max_new_tokens=30, stop_sequences=[stop], stats=stats)
        (g,) = generate(model, [prompt], method="mars_lossless", **kw, **KW)
        excess = stats.get("accepted_drafts", 0) - (len(g.token_ids) - g.forwards)
        assert 0 <= excess <= 1, excess


def test_lossless_on_the_tiny_worlds_gsm8k_prompts(trained_tiny):
    """The trained tiny MARS checkpoint of the fixtures on its world's GSM8K-like prompts: greedy AR's tokens with
    fewer forwards than tokens. (The fixture's checkpoint is trained briefly: its mask predictions are rarely
    confident on these prompts, hence the low tau; lossy MARS takes ~2.4 tokens per forward there.)"""
    from mars.decoding.generation import encode_prompts, load_model
    from mars.training.data import load_records

    model, tokenizer = load_model(trained_tiny["mars"])
    records = [r for r in load_records(trained_tiny["world"] / "data", "test") if r["family"] == "gsm8k"][:8]
    prompts = encode_prompts(tokenizer, [r["prompt"] for r in records])
    kw = dict(
        eos_token_ids=[tokenizer.eos_token_id],
        pad_token_id=tokenizer.pad_token_id,
        mask_token_id=tokenizer.mask_token_id,
        block_size=4,
        max_new_tokens=64,
    )
    width = max(map(len, prompts))
    with torch.no_grad():
        out = model.generate(
            input_ids=torch.tensor([[tokenizer.pad_token_id] * (width - len(p)) + p for p in prompts]),
            attention_mask=torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts]),
            do_sample=False,
            max_new_tokens=64,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
    ref = [
        row[: row.index(tokenizer.eos_token_id) + 1] if tokenizer.eos_token_id in row else row
        for row in out[:, width:].tolist()
    ]
    stats = {}
    gens = generate(model, prompts, method="mars_lossless", tau=0.2, stats=stats, **kw)
    assert [g.token_ids for g in gens] == ref
    tokens, forwards = sum(len(g.token_ids) for g in gens), sum(g.forwards for g in gens)
    assert tokens / forwards > 1.0 and stats["accepted_drafts"] > 0, (tokens, forwards, stats)


# ---------------------------------------------------------------------------------------------------------------
# per-request tau


MIXED_TAUS = [0.5, 1.0, 0.9, 0.3, 0.7, 1.0, 0.2, 0.95, 0.6, 0.4]


@pytest.mark.parametrize("cache", ["cursor", "none", "block"])
def test_mixed_tau_batch_gives_each_row_what_it_gets_alone(cache):
    model = trained_model()
    prompts = TRAINED_PROMPTS
    kw = dict(cache=cache, cache_block_size=3, max_new_tokens=40, **KW)
    for method in ("mars", "mars_lossless"):
        stats = {}
        batch = generate(model, prompts, method=method, tau=MIXED_TAUS, stats=stats, **kw)
        check_counts(batch, 40, stats)
        for p, t, g in zip(prompts, MIXED_TAUS, batch):
            [alone] = generate(model, [p], method=method, tau=t, **kw)
            assert (g.token_ids, g.chunks) == (alone.token_ids, alone.chunks), (method, t)
            if method == "mars":  # and the naive single-sequence reference at the row's own tau
                expect = naive_mars(model, p, B=4, tau=t, metric="probability", max_new_tokens=40, eos_ids={EOS})
                assert (g.token_ids, g.chunks) == expect
        if method == "mars":  # the rows at tau 1.0 took one token per forward, others several
            assert all(set(g.chunks) == {1} for g, t in zip(batch, MIXED_TAUS) if t == 1.0)
            assert any(c > 1 for g in batch for c in g.chunks)


def test_mixed_tau_block_diffusion_and_tensor_tau():
    model = trained_model()
    kw = dict(max_new_tokens=12, **KW)
    taus = torch.tensor(MIXED_TAUS)
    batch = generate(model, TRAINED_PROMPTS, method="block_diffusion", tau=taus, **kw)
    for p, t, g in zip(TRAINED_PROMPTS, MIXED_TAUS, batch):
        [alone] = generate(model, [p], method="block_diffusion", tau=t, **kw)
        assert (g.token_ids, g.chunks) == (alone.token_ids, alone.chunks)
    same = generate(model, TRAINED_PROMPTS, method="mars", tau=[0.5] * len(TRAINED_PROMPTS), **kw)
    assert [g.chunks for g in same] == [
        g.chunks for g in generate(model, TRAINED_PROMPTS, method="mars", tau=0.5, **kw)
    ]


@pytest.mark.parametrize(
    "tau,match",
    [([0.5, 0.5], "2 values for 3 prompts"), ([0.5, 1.5, 0.5], "tau must be in"), (torch.ones(3, 1), "shape")],
)
def test_per_row_tau_validation(tau, match):
    model = trained_model()
    with pytest.raises(ValueError, match=match):
        generate(model, TRAINED_PROMPTS[:3], method="mars", tau=tau, max_new_tokens=4, **KW)


def test_lossless_needs_a_mask_token():
    with pytest.raises(ValueError, match="mask_token_id"):
        generate(
            trained_model(), [[5, 6]], method="mars_lossless", eos_token_ids=[EOS], pad_token_id=PAD, max_new_tokens=2
        )
