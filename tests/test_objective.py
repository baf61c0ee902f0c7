"""The dual-stream forward and losses against independent references (plain causal forward, hand-computed CE)."""

import math

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from mars.training.objective import IGNORE, build_dual_stream, dual_stream_logits, dual_stream_loss

MASK = 3
VOCAB = 40


def tiny_model(attn="sdpa", seed=0):
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        attn_implementation=attn,
    )
    return Qwen2ForCausalLM(config).eval()


def make_batch(seed=0, lengths=(11, 7, 14), prompts=(4, 3, 6)):
    """Right-padded batch: prompt tokens then response tokens, labels = token on response positions."""
    generator = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.randint(5, VOCAB, (len(lengths), width), generator=generator)
    attention = torch.zeros_like(ids)
    labels = torch.full_like(ids, IGNORE)
    for row, (n, p) in enumerate(zip(lengths, prompts)):
        attention[row, :n] = 1
        ids[row, n:] = 0
        labels[row, p:n] = ids[row, p:n]
    return ids, attention, labels


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("variant", ["mars", "bidirectional"])
def test_clean_stream_equals_plain_causal_forward(attn, variant):
    model = tiny_model(attn)
    ids, attention, labels = make_batch()
    with torch.no_grad():
        for block in (1, 3, 4):
            batch = build_dual_stream(ids, attention, labels, mask_token_id=MASK, block_size=block, variant=variant)
            clean, _ = dual_stream_logits(model, batch)
            reference = model(input_ids=ids, attention_mask=attention).logits
            real = attention.bool()
            assert (clean[real] - reference[real]).abs().max().item() < 1e-5


def test_noisy_stream_layout():
    ids, attention, labels = make_batch()
    batch = build_dual_stream(ids, attention, labels, mask_token_id=MASK, block_size=4, trim=False)
    noisy = batch.input_ids[:, ids.shape[1] :]
    response = labels != IGNORE
    assert torch.equal(noisy[response], torch.full_like(noisy[response], MASK))
    assert torch.equal(noisy[~response], ids[~response])
    assert torch.equal(batch.position_ids[0], torch.cat([torch.arange(14), torch.arange(14)]))
    # targets right-shifted: position t predicts token t+1 when t+1 is a response token
    assert batch.noisy_targets[0, 3].item() == ids[0, 4].item() and batch.noisy_targets[0, 2].item() == IGNORE
    assert batch.noisy_targets[0, 10].item() == IGNORE  # t+1 = 11 is padding


@pytest.mark.parametrize("variant", ["mars", "bidirectional"])
def test_no_leakage_into_noisy_logits(variant):
    """Changing clean tokens at positions >= blk(q)*B, or noisy tokens after q, leaves noisy logits at q alone."""
    model = tiny_model("eager")
    ids, attention, labels = make_batch(lengths=(13,), prompts=(3,))
    length, block = 13, 4
    with torch.no_grad():
        base = build_dual_stream(
            ids, attention, labels, mask_token_id=MASK, block_size=block, variant=variant, trim=False
        )
        _, noisy_ref = dual_stream_logits(model, base)
        generator = torch.Generator().manual_seed(1)
        for q in range(length):
            start = (q // block) * block
            clean_changed = base.input_ids.clone()
            clean_changed[0, start:length] = torch.randint(5, VOCAB, (length - start,), generator=generator)
            _, noisy = dual_stream_logits(model, _with_ids(base, clean_changed))
            assert torch.allclose(noisy[0, q], noisy_ref[0, q], atol=1e-6), q
            if variant == "mars" and q + 1 < length:
                noisy_changed = base.input_ids.clone()
                noisy_changed[0, length + q + 1 :] = torch.randint(5, VOCAB, (length - q - 1,), generator=generator)
                _, noisy = dual_stream_logits(model, _with_ids(base, noisy_changed))
                assert torch.allclose(noisy[0, q], noisy_ref[0, q], atol=1e-6), q
        # and the mask is not vacuous: an earlier clean block does change the noisy logits of a later block
        changed = base.input_ids.clone()
        changed[0, 0:4] = (changed[0, 0:4] + 1 - 5) % (VOCAB - 5) + 5
        _, noisy = dual_stream_logits(model, _with_ids(base, changed))
        assert not torch.allclose(noisy[0, 8], noisy_ref[0, 8], atol=1e-4)


def _with_ids(batch, ids):
    from dataclasses import replace

    return replace(batch, input_ids=ids)


def hand_ce(logits_row: torch.Tensor, target: int) -> float:
    values = logits_row.double().tolist()
    top = max(values)
    return -(values[target] - top - math.log(sum(math.exp(v - top) for v in values)))


def test_losses_equal_hand_computed_cross_entropy():
    model = tiny_model("eager")
    ids, attention, labels = make_batch()
    with torch.no_grad():
        batch = build_dual_stream(ids, attention, labels, mask_token_id=MASK, block_size=4, trim=False)
        clean, noisy = dual_stream_logits(model, batch)
        loss, parts = dual_stream_loss(model, batch, w_ar=1.0)
        _, parts_trimmed = dual_stream_loss(
            model, build_dual_stream(ids, attention, labels, mask_token_id=MASK, block_size=4), w_ar=1.0
        )
        loss0, parts0 = dual_stream_loss(model, batch, w_ar=0.0)
    ar_terms, mask_terms = [], []
    for row in range(ids.shape[0]):
        for t in range(ids.shape[1] - 1):
            if labels[row, t + 1] != IGNORE:
                ar_terms.append(hand_ce(clean[row, t], int(ids[row, t + 1])))
                mask_terms.append(hand_ce(noisy[row, t], int(ids[row, t + 1])))
    n = len(ar_terms)
    assert n == int((labels != IGNORE).sum())
    assert parts["loss_ar"].item() == pytest.approx(sum(ar_terms) / n, rel=1e-5)
    assert parts["loss_mask"].item() == pytest.approx(sum(mask_terms) / n, rel=1e-5)
    assert loss.item() == pytest.approx(parts["loss_mask"].item() + parts["loss_ar"].item(), rel=1e-6)
    # trimming the unused noisy prefix changes nothing
    assert parts_trimmed["loss_mask"].item() == pytest.approx(parts["loss_mask"].item(), rel=1e-5)
    # w_AR = 0 removes exactly L_AR
    assert loss0.item() == pytest.approx(loss.item() - parts["loss_ar"].item(), rel=1e-5)
    assert parts0["loss_mask"].item() == pytest.approx(parts["loss_mask"].item(), rel=1e-6)


def _grads(model) -> dict:
    return {n: (p.grad.clone() if p.grad is not None else torch.zeros_like(p)) for n, p in model.named_parameters()}


def test_w_ar_scales_exactly_the_gradient_of_the_plain_next_token_loss():
    """grad L(w_AR) = grad L(w_AR=1) - (1 - w_AR) grad L_AR, with L_AR computed independently as the cross-entropy of
    a plain causal forward: at w_AR = 0 nothing of the clean targets' gradient is left (a leaked 0.5 L_AR fails)."""
    ids, attention, labels = make_batch()
    batch = build_dual_stream(ids, attention, labels, mask_token_id=MASK, block_size=4)
    model = tiny_model("eager")
    grads = {}
    for w in (0.0, 0.25, 1.0):
        model.zero_grad()
        dual_stream_loss(model, batch, w_ar=w)[0].backward()
        grads[w] = _grads(model)
    model.zero_grad()
    logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1]
    targets = labels[:, 1:]
    keep = targets != IGNORE
    torch.nn.functional.cross_entropy(logits[keep], targets[keep]).backward()
    grad_ar = _grads(model)
    assert max(g.abs().max().item() for g in grad_ar.values()) > 1e-3  # L_AR has a real gradient to leave out
    for w in (0.0, 0.25):
        for name, g in grads[w].items():
            expected = grads[1.0][name] - (1.0 - w) * grad_ar[name]
            assert torch.allclose(g, expected, atol=1e-6), (w, name, (g - expected).abs().max().item())


def test_block_diffusion_targets_are_unshifted_and_weighted():
    ids, attention, labels = make_batch()
    generator = torch.Generator().manual_seed(0)
    batch = build_dual_stream(
        ids,
        attention,
        labels,
        mask_token_id=MASK,
        block_size=4,
        variant="block_diffusion",
        trim=False,
        generator=generator,
    )
    noisy = batch.input_ids[:, ids.shape[1] :]
    masked = noisy == MASK
    assert masked.any()
    assert torch.equal(batch.noisy_targets[masked], ids[masked])  # a masked position predicts its own token
    assert (batch.noisy_targets[~masked] == IGNORE).all()
    assert (batch.noisy_weights[masked] >= 1.0).all()  # 1/t with t in (0, 1]
    assert (batch.clean_targets == IGNORE).all()  # no AR loss
    assert not (masked & (labels == IGNORE)).any()  # only response tokens are masked
