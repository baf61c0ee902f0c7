"""The authors' block cache (``cache="authors_block"``, their MARSBlockCachedSampler's definition) against a naive,
uncached, single-sequence reference written here, and against Hugging Face greedy at tau = 1.0."""

from __future__ import annotations

import pytest
import torch

from mars.decoding.engine import generate
from tests.test_decoding import EOS, MASK, NOISE, PAD, TRAINED_PROMPTS, random_setup, trained_model

pytestmark = pytest.mark.usefixtures("single_thread")


def naive_authors_block(model, prompt, *, C, tau, max_new_tokens, eos_ids):
    """Batch 1, no cache: blocks of C positions from the prompt end; every inner step runs the WHOLE sequence with
    the block's unfilled positions as masks, and accepts from the first unfilled position (the AR prediction,
    then masks' predictions while probability >= tau). Forwards: 1 prefill + inner steps + 1 commit per block that
    was filled without finishing the sequence."""
    seq, gen, chunks = list(prompt), [], [0]
    while True:
        c, start = min(C, max_new_tokens - len(gen)), len(seq)
        while len(seq) - start < c:
            k = len(seq) - start
            x = torch.tensor([seq + [MASK] * (c - k)])
            with torch.no_grad():
                logits = model(input_ids=x).logits[0, start + k - 1 : start + c - 1].float()
            probs = logits.softmax(-1)
            conf, toks = probs.max(-1)
            gap = logits.topk(2, -1).values
            n = 0
            for j, t in enumerate(toks.tolist()):
                assert gap[j, 0] - gap[j, 1] > NOISE, "near-tie of the top-2 logits: pick another seed"
                if j > 0:
                    assert abs(float(conf[j]) - tau) > NOISE, "confidence within float noise of tau"
                    if tau >= 1.0 or conf[j] < tau:
                        break
                seq.append(t)
                gen.append(t)
                n += 1
                if t in eos_ids or len(gen) == max_new_tokens:
                    chunks.append(n)
                    return gen, chunks
            chunks.append(n)
        chunks.append(0)  # the commit forward


@pytest.mark.parametrize("tau", [1.0, 0.9, 0.5])
@pytest.mark.parametrize("C", [4, 8])
def test_authors_block_cache_equals_the_uncached_reference(tau, C):
    model = trained_model("sdpa")
    expect = [naive_authors_block(model, p, C=C, tau=tau, max_new_tokens=30, eos_ids={EOS}) for p in TRAINED_PROMPTS]
    stats = {}
    gens = generate(
        model,
        TRAINED_PROMPTS,
        method="mars",
        block_size=4,
        tau=tau,
        cache="authors_block",
        cache_block_size=C,
        max_new_tokens=30,
        eos_token_ids=[EOS],
        pad_token_id=PAD,
        mask_token_id=MASK,
        stats=stats,
    )
    assert [(g.token_ids, g.chunks) for g in gens] == expect
    for g in gens:
        assert g.forwards == len(g.chunks) and sum(g.chunks) == len(g.token_ids)
    if tau < 1.0:
        assert any(c > 1 for g in gens for c in g.chunks), "no multi-token step: the test would be vacuous"
    else:  # one token per inner forward: C + 1 forwards per full block of C tokens
        assert all(c in (0, 1) for g in gens for c in g.chunks)


def test_authors_block_cache_at_tau_one_is_hf_greedy_on_a_ragged_batch():
    model, prompts, eos, ref = random_setup("eager")
    gens = generate(
        model,
        prompts,
        method="mars",
        block_size=4,
        tau=1.0,
        cache="authors_block",
        cache_block_size=8,
        max_new_tokens=24,
        eos_token_ids=[eos],
        pad_token_id=PAD,
        mask_token_id=MASK,
    )
    assert [g.token_ids for g in gens] == ref


def test_authors_block_cache_decodes_mars_only():
    with pytest.raises(ValueError, match="authors_block"):
        generate(
            trained_model("sdpa"),
            [[1, 2]],
            method="mars_lossless",
            cache="authors_block",
            eos_token_ids=[EOS],
            pad_token_id=PAD,
            mask_token_id=MASK,
        )
