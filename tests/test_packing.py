"""The packed dual-stream layout gives the padded layout's losses and gradients (the reference), per sequence, for
every variant, normalisation and attention implementation; and it feeds no padding."""

import pytest
import torch

from mars.training.objective import (
    IGNORE,
    build_dual_stream,
    dual_stream_loss,
    dual_stream_row_sums,
    pack_dual_stream,
)
from mars.training.segment_attention import SEGMENT_ATTENTION, use_segment_attention
from tests.test_objective import MASK, make_batch, tiny_model

# rows with different prompt lengths (so each row's own first target block differs) and different lengths
LENGTHS, PROMPTS = (11, 7, 14, 9), (4, 3, 9, 1)


def batches(variant, seed=0, **kwargs):
    ids, attention, labels = make_batch(seed=seed, lengths=LENGTHS, prompts=PROMPTS)
    generator = (lambda: torch.Generator().manual_seed(5)) if variant == "block_diffusion" else (lambda: None)
    padded = build_dual_stream(
        ids, attention, labels, mask_token_id=MASK, block_size=4, variant=variant, generator=generator(), **kwargs
    )
    again = build_dual_stream(
        ids, attention, labels, mask_token_id=MASK, block_size=4, variant=variant, generator=generator(), **kwargs
    )
    return padded, pack_dual_stream(again, block_size=4, variant=variant)


def test_packed_layout_has_no_padding_and_trims_each_row_to_its_own_first_target_block():
    padded, packed = batches("mars")
    # hand-computed: row i's first shifted target is at prompts[i] - 1, its block start (B = 4) at 0, 0, 8, 0
    starts = [0, 0, 8, 0]
    # each row's last token is dead in both streams (no target, the key of no other query): left out
    spans = [(length - 1) + (length - start - 1) for length, start in zip(LENGTHS, starts)]
    assert packed.input_ids.shape == (1, sum(spans))
    assert [end - start for start, end in packed.segments] == spans
    assert padded.noisy_start == 0  # the padded layout keeps every row's noisy copy from the batch's first target
    assert packed.input_ids.numel() < padded.input_ids.numel()
    # the same targets, each once
    assert sorted(packed.targets[packed.targets != IGNORE].tolist()) == sorted(
        torch.cat([padded.clean_targets, padded.noisy_targets], 1)[
            torch.cat([padded.clean_targets, padded.noisy_targets], 1) != IGNORE
        ].tolist()
    )
    # positions restart per stream: row 2's noisy copy (after its 13 clean tokens) starts at position 8
    start, _ = packed.segments[2]
    assert packed.position_ids[0, start + 12 : start + 16].tolist() == [12, 8, 9, 10]


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("variant", ["mars", "bidirectional", "block_diffusion"])
@pytest.mark.parametrize("normalization", ["token", "sequence"])
def test_packed_loss_and_gradients_equal_the_padded_layout(attn, variant, normalization):
    model = tiny_model(attn).train()
    switched = use_segment_attention(model)
    assert switched == (attn == "sdpa")
    padded, packed = batches(variant)
    w_ar = 0.0 if variant == "block_diffusion" else 1.0
    results = []
    for batch in (padded, packed):
        model.zero_grad(set_to_none=True)
        loss, parts = dual_stream_loss(model, batch, w_ar, normalization=normalization)
        loss.backward()
        grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        results.append((loss.detach(), parts, grads, dual_stream_row_sums(model, batch)))
    (loss_a, parts_a, grads_a, rows_a), (loss_b, parts_b, grads_b, rows_b) = results
    torch.testing.assert_close(loss_b, loss_a, rtol=1e-5, atol=1e-6)
    for key in ("loss_mask", "loss_ar", "sum_mask", "sum_ar"):
        torch.testing.assert_close(parts_b[key], parts_a[key], rtol=1e-5, atol=1e-6)
    for a, b in zip(rows_a, rows_b):  # per sequence, not only in total
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    assert len(grads_a) == len(grads_b)
    for a, b in zip(grads_a, grads_b):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)


def test_segment_attention_runs_once_per_sequence_and_equals_the_full_block_diagonal_mask(monkeypatch):
    import mars.training.segment_attention as segment_attention

    model = tiny_model("sdpa")
    _, packed = batches("mars")
    with torch.no_grad():
        full = dual_stream_row_sums(model, packed)  # plain sdpa over the whole row with the block-diagonal mask
        assert use_segment_attention(model)
        calls = []
        inner = segment_attention.sdpa_attention_forward

        def counting(module, query, *args, **kwargs):
            calls.append(query.shape[2])
            return inner(module, query, *args, **kwargs)

        monkeypatch.setattr(segment_attention, "sdpa_attention_forward", counting)
        per_sequence = dual_stream_row_sums(model, packed)
    for a, b in zip(full, per_sequence):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    spans = [end - start for start, end in packed.segments]
    assert calls == spans * model.config.num_hidden_layers  # each layer: one sdpa call per sequence
    assert model.config._attn_implementation == SEGMENT_ATTENTION
    assert "mars_segments" not in model.config.to_json_string()  # the switch is not saved with the model


def test_packing_refuses_left_padding():
    ids, attention, labels = make_batch(lengths=(5, 8), prompts=(2, 3))
    left = torch.stack([attention[0].roll(3), attention[1]])
    batch = build_dual_stream(ids, left, labels, mask_token_id=MASK, block_size=4)
    with pytest.raises(ValueError, match="right-padded"):
        pack_dual_stream(batch, block_size=4)


def test_a_row_without_targets_feeds_its_clean_copy_only_and_the_loss_is_unchanged():
    model = tiny_model("sdpa").train()
    use_segment_attention(model)
    ids, attention, labels = make_batch(lengths=(9, 7), prompts=(3, 2))
    labels[1] = IGNORE  # (TRL drops such examples; a micro-batch may still hold one)
    padded = build_dual_stream(ids, attention, labels, mask_token_id=MASK, block_size=4)
    packed = pack_dual_stream(padded, block_size=4)
    assert [end - start for start, end in packed.segments] == [8 + 8, 6]  # row 1: its clean copy, last token dead
    for a, b in zip(dual_stream_row_sums(model, padded), dual_stream_row_sums(model, packed)):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


def test_a_switched_model_decodes_as_sdpa_does():
    """After training the model stays switched (in memory): its own masks must still be built, so a left-padded
    batch decodes as the unswitched model does (HF's greedy generate, token for token)."""
    model, switched = tiny_model("sdpa"), tiny_model("sdpa")
    assert use_segment_attention(switched)
    ids = torch.tensor([[0, 0, 7, 8, 9, 10], [11, 12, 13, 14, 15, 16]])
    attention = (ids != 0).long()
    kwargs = dict(attention_mask=attention, max_new_tokens=8, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        expected, got = model.generate(ids, **kwargs), switched.generate(ids, **kwargs)
        assert torch.equal(got, expected)
        logits = switched(input_ids=ids, attention_mask=attention).logits
        torch.testing.assert_close(logits, model(input_ids=ids, attention_mask=attention).logits)
