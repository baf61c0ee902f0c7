"""Tests of mars/decoding/speculative.py (speculative decoding with an AR or MARS draft and an AR or MARS target).

Independent expectations: Hugging Face greedy ``generate`` of the target (AR target, any draft); a brute-force
construction of the verification window's attention rules; separate uncached forwards of prompt + d_1..d_j + masks
(one per mask group); a naive, uncached, batch-1 re-implementation of the whole loop for a MARS target; forward
calls counted on the models themselves.
"""

from __future__ import annotations

import pytest
import torch

from mars.decoding import speculative
from mars.decoding.speculative import Stream, speculative_generate, verify_forward, verify_layout
from tests.test_decoding import EOS, MASK, NOISE, TRAINED_PROMPTS, hf_greedy, make_model, random_setup, trained_model

pytestmark = pytest.mark.usefixtures("single_thread")


class CountingModel(torch.nn.Module):
    """Wraps a model and counts its forward calls (the decoder's own counters are checked against these)."""

    def __init__(self, model):
        super().__init__()
        self.model, self.calls = model, 0
        self.config, self.dtype = model.config, model.dtype

    def forward(self, **kwargs):
        self.calls += 1
        return self.model(**kwargs)


def check_counters(outs, k, max_new_tokens):
    for o in outs:
        assert len(o.proposed) == len(o.accepted) == len(o.extra) == o.target_forwards
        assert sum(o.accepted) + sum(o.extra) == len(o.token_ids) <= max_new_tokens
        assert all(a <= p <= k for a, p in zip(o.accepted, o.proposed))
        # every target forward yields at least one token beyond its accepted drafts, except where EOS cut it
        assert all(e >= 1 for e in o.extra[:-1])
        assert o.tokens_per_target_forward == pytest.approx(len(o.token_ids) / o.target_forwards)


# ---------------------------------------------------------------------------------------------------------------
# (a) AR target: exactly the target's greedy output, whatever the draft


@pytest.mark.parametrize("k", [1, 3, 5])
def test_ar_target_equals_hf_greedy_for_any_draft(k):
    target = trained_model()
    ref = hf_greedy(target, TRAINED_PROMPTS, 30, eos_id=EOS)
    drafts = [
        ("random draft", make_model("sdpa", seed=5), "ar"),
        ("target as draft", target, "ar"),
        ("MARS draft tau 0.5", target, "mars"),
        ("random MARS draft", make_model("sdpa", seed=6), "mars"),
    ]
    for name, draft, mode in drafts:
        outs = speculative_generate(
            draft,
            target,
            TRAINED_PROMPTS,
            k=k,
            draft_mode=mode,
            target_mode="ar",
            tau=0.5,
            max_new_tokens=30,
            eos_token_ids=[EOS],
            mask_token_id=MASK,
        )
        assert [o.token_ids for o in outs] == ref, name
        check_counters(outs, k, 30)
        if draft is target and mode == "ar":  # the target's own greedy tokens are always accepted (the last
            # forward's drafts may run past EOS, which ends the row)
            assert all(o.accepted[:-1] == o.proposed[:-1] for o in outs)
            assert all(e == 1 for o in outs for e in o.extra[:-1])
        if name == "random draft":
            assert sum(sum(o.accepted) for o in outs) < sum(sum(o.proposed) for o in outs)


def test_ar_target_on_a_random_target_with_eos():
    """The random target of test_decoding (ragged prompts, an EOS that some rows emit): drafts from a trained model
    (AR and MARS) mostly fail, so rejected drafts and crops happen all the time."""
    target, prompts, eos, ref = random_setup("eager")
    for mode in ("ar", "mars"):
        outs = speculative_generate(
            trained_model("eager"),
            target,
            prompts,
            k=3,
            draft_mode=mode,
            tau=0.3,
            max_new_tokens=24,
            eos_token_ids=[eos],
            mask_token_id=MASK,
        )
        assert [o.token_ids for o in outs] == ref
        check_counters(outs, 3, 24)


def test_forward_counters_match_the_models_calls():
    target = CountingModel(trained_model())
    # a random AR draft; the trained model as a MARS draft (confident, so it proposes several tokens per forward)
    for mode, draft in (("ar", CountingModel(make_model("sdpa", seed=5))), ("mars", CountingModel(trained_model()))):
        target.calls = 0
        outs = speculative_generate(
            draft,
            target,
            TRAINED_PROMPTS,
            k=4,
            draft_mode=mode,
            target_mode="mars",
            tau=0.5,
            max_new_tokens=20,
            eos_token_ids=[EOS],
            mask_token_id=MASK,
        )
        assert sum(o.target_forwards for o in outs) == target.calls
        assert sum(o.draft_forwards for o in outs) == draft.calls
        if mode == "ar":  # one draft forward per proposed token
            assert all(o.draft_forwards == sum(o.proposed) for o in outs)
        else:  # the MARS draft proposes several tokens per forward
            assert sum(o.draft_forwards for o in outs) < sum(sum(o.proposed) for o in outs)
        check_counters(outs, 4, 20)


# ---------------------------------------------------------------------------------------------------------------
# (b) the verification window's attention and positions, brute force


def brute_force_layout(n_cached, n_feed, n_drafts, group):
    """Literal rules: slot kinds first, then every (query, key) pair."""
    slots = [("cache", p) for p in range(n_cached)]
    slots += [("feed", n_cached + i) for i in range(n_feed)]
    n = n_cached + n_feed
    slots += [("draft", n + i, i + 1) for i in range(n_drafts)]  # d_{i+1} at position n + i
    for j in range(n_drafts + 1):
        slots += [("mask", n + j + i, j, i) for i in range(group)]  # group j, its i-th mask
    window = slots[n_cached:]
    allowed = torch.zeros(len(window), len(slots), dtype=torch.bool)
    for q, query in enumerate(window):
        for k, key in enumerate(slots):
            if query[0] in ("feed", "draft"):  # real tokens: causal over cache + real tokens, never a mask
                ok = key[0] != "mask" and key[1] <= query[1]
            else:  # mask i of group j: cache, feed, d_1..d_j, and masks 0..i of its own group
                _, _, j, i = query
                if key[0] in ("cache", "feed"):
                    ok = True
                elif key[0] == "draft":
                    ok = key[2] <= j
                else:
                    ok = key[2] == j and key[3] <= i
            allowed[q, k] = ok
    return allowed, torch.tensor([s[1] for s in window])


@pytest.mark.parametrize("n_cached,n_feed,n_drafts,group", [(0, 3, 2, 3), (5, 1, 4, 3), (4, 2, 0, 2), (7, 1, 3, 1)])
def test_verification_layout_equals_brute_force(n_cached, n_feed, n_drafts, group):
    allowed, positions = verify_layout(n_cached, n_feed, n_drafts, group)
    expect_allowed, expect_positions = brute_force_layout(n_cached, n_feed, n_drafts, group)
    assert torch.equal(allowed, expect_allowed)
    assert torch.equal(positions, expect_positions)


# ---------------------------------------------------------------------------------------------------------------
# (c) group j == a separate forward of prompt + d_1..d_j + masks


@pytest.mark.parametrize("n_cached", [0, 5])
def test_group_logits_equal_separate_forwards(n_cached):
    model = make_model("eager", seed=3)
    B, K = 4, 3
    seq = [20, 22, 24, 26, 28, 30, 33, 35, 36]
    drafts = [40, 41, 42]
    stream = Stream(model)
    with torch.no_grad():
        if n_cached:  # part of the sequence already in the cache, as after earlier rounds
            stream.forward(seq[:n_cached])
            stream.commit(seq[:n_cached])
        logits, feed = verify_forward(stream, seq, drafts, B - 1, MASK)
        assert feed == seq[n_cached:]
        real = len(feed) + K
        for j in range(K + 1):
            alone = model(input_ids=torch.tensor([seq + drafts[:j] + [MASK] * B])).logits[0].float()
            # a_j: the prediction made by the last real token (d_j, or the last token of seq for j = 0)
            ar = logits[len(feed) - 1 + j]
            assert (ar - alone[len(seq) + j - 1]).abs().max() < 1e-5
            group = logits[real + j * (B - 1) : real + (j + 1) * (B - 1)]
            expect = alone[len(seq) + j : len(seq) + j + B - 1]
            assert (group - expect).abs().max() < 1e-5, j


def test_verify_crops_rejected_drafts_and_masks():
    model = make_model("eager", seed=3)
    stream = Stream(model)
    seq = [20, 22, 24, 26]
    with torch.no_grad():
        greedy = model(input_ids=torch.tensor([seq])).logits[0, -1].argmax().item()
        new, j = speculative.verify(
            stream, seq, [greedy, 7, 8], mode="mars", block_size=4, tau=0.5, metric="probability", mask_id=MASK
        )
    assert j >= 1 and new[0] == greedy
    assert stream.cached == seq + [greedy, 7, 8][:j]
    assert stream.cache.get_seq_length() == len(stream.cached)


# ---------------------------------------------------------------------------------------------------------------
# MARS target: the whole loop against a naive uncached reference


def naive_speculative(draft, target, prompt, *, k, B, tau, max_new_tokens):
    """Batch 1, no cache: AR draft; the target's verdict from one causal forward of seq + drafts, group j's
    predictions from a separate forward of seq + d_1..d_j + B - 1 masks."""
    seq, gen, per_forward = list(prompt), [], []

    def logits_of(model, ids):
        with torch.no_grad():
            out = model(input_ids=torch.tensor([ids])).logits[0].float()
        top = out.topk(2, -1).values
        assert (top[:, 0] - top[:, 1] > NOISE).all(), "near-tie of the top-2 logits: pick another seed"
        return out

    while True:
        n_drafts = min(k, max_new_tokens - len(gen) - 1)
        drafts = []
        for _ in range(n_drafts):
            drafts.append(int(logits_of(draft, seq + drafts)[-1].argmax()))
        verdict = logits_of(target, seq + drafts)[len(seq) - 1 :].argmax(-1).tolist()
        j = 0
        while j < len(drafts) and drafts[j] == verdict[j]:
            j += 1
        new = drafts[:j] + [verdict[j]]
        group = logits_of(target, seq + drafts[:j] + [MASK] * (B - 1))[len(seq) + j :]
        probs = group.softmax(-1)
        for p in range(B - 1):
            assert abs(float(probs[p].max()) - tau) > NOISE, "confidence within float noise of tau: another seed"
            if probs[p].max() < tau:
                break
            new.append(int(probs[p].argmax()))
        taken = 0
        for t in new:
            seq.append(t)
            gen.append(t)
            taken += 1
            if t == EOS or len(gen) == max_new_tokens:
                per_forward.append((min(j, taken), taken - min(j, taken)))
                return gen, per_forward
        per_forward.append((j, taken - j))


@pytest.mark.parametrize("tau", [0.5, 0.9])
def test_mars_target_matches_naive_reference(tau):
    target = trained_model()
    for draft in (make_model("sdpa", seed=5), target):
        outs = speculative_generate(
            draft,
            target,
            TRAINED_PROMPTS,
            k=3,
            draft_mode="ar",
            target_mode="mars",
            block_size=4,
            tau=tau,
            max_new_tokens=30,
            eos_token_ids=[EOS],
            mask_token_id=MASK,
        )
        expect = [naive_speculative(draft, target, p, k=3, B=4, tau=tau, max_new_tokens=30) for p in TRAINED_PROMPTS]
        assert [(o.token_ids, list(zip(o.accepted, o.extra))) for o in outs] == expect
        check_counters(outs, 3, 30)
        # the MARS groups add tokens beyond the bonus: more tokens per target forward than accepted drafts + 1
        assert any(e > 1 for o in outs for e in o.extra)


def test_mars_target_at_tau_one_is_the_ar_target():
    target = trained_model()
    ref = hf_greedy(target, TRAINED_PROMPTS, 30, eos_id=EOS)
    outs = speculative_generate(
        make_model("sdpa", seed=5),
        target,
        TRAINED_PROMPTS,
        k=2,
        target_mode="mars",
        tau=1.0,
        max_new_tokens=30,
        eos_token_ids=[EOS],
        mask_token_id=MASK,
    )
    assert [o.token_ids for o in outs] == ref


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(k=-1), "k "),
        (dict(draft_mode="medusa"), "draft_mode"),
        (dict(target_mode="x"), "target_mode"),
        (dict(tau=0.0), "tau"),
        (dict(block_size=0), "block_size"),
        (dict(target_mode="mars", mask_token_id=None), "mask_token_id"),
        (dict(metric="logit"), "metric"),
    ],
)
def test_argument_validation(kwargs, match):
    model = make_model("sdpa")
    args = dict(k=2, eos_token_ids=[EOS], mask_token_id=MASK, max_new_tokens=4)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        speculative_generate(model, model, [[5, 6]], **args)
